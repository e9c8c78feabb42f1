"""How the processes of a run agree on each stage of a save or a load.

Each stage ends with every process telling the others whether it succeeded (one gather, never a
barrier a failed process would skip): a failure on any process makes every process raise, at
once, rather than the others waiting for the process group's timeout. Without a process group
these are plain local checks. A save committed in the background passes ``group``, a process
group of its own, so its agreement never interleaves with the training's collectives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import CheckpointError, quoted

if TYPE_CHECKING:
    from accelkw_core.runtime.state import RunState

__all__ = ["agree", "alone", "barrier", "exchange", "failures", "node_of", "raise_agreed"]


#: Set while the main process saves alone (``participants``): its stages agree with no one.
_ALONE: ContextVar[bool] = ContextVar("accelkw_save_alone", default=False)


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Within it, on this thread, every agreement is this process's own (a lone save)."""
    token = _ALONE.set(True)
    try:
        yield
    finally:
        _ALONE.reset(token)


def _grouped(state: RunState) -> bool:
    from accelkw_core.runtime import collectives as ops

    return state.distributed and ops.has_group() and not _ALONE.get()


def exchange(state: RunState, value: Any, group: Any = None) -> list[Any]:
    """Every process's ``value``, in rank order (``[value]`` without a process group).

    On ``group`` when given (a ``torch.distributed`` group), else on the default one.
    """
    from accelkw_core.runtime import collectives as ops

    if not _grouped(state):
        return [value]
    if group is None:
        return list(ops.gather_objects([value], state))
    import torch.distributed as dist

    parts: list[Any] = [None] * state.world_size
    dist.all_gather_object(parts, value, group=group)
    return parts


def failures(
    state: RunState, error: BaseException | None, group: Any = None
) -> list[tuple[int, str]]:
    """``(rank, message)`` of every process that failed; every process gets the same list."""
    report = None if error is None else (state.rank, quoted(error))
    return [r for r in exchange(state, report, group) if r is not None]


def raise_agreed(error: BaseException | None, failed: list[tuple[int, str]]) -> None:
    """Raise this process's own error, else the first other process's, else nothing."""
    if error is not None:
        raise error
    if failed:
        rank, message = failed[0]
        raise CheckpointError(f"(process {rank})", f"failed: {message}")


def agree(state: RunState, error: BaseException | None, group: Any = None) -> None:
    """Raise on every process if any failed: the process's own error, else the first one's."""
    raise_agreed(error, failures(state, error, group))


def barrier(state: RunState, group: Any = None) -> None:
    """Wait for every process (nothing to wait for without a process group)."""
    from accelkw_core.runtime import collectives as ops

    if not _grouped(state):
        return
    if group is None:
        ops.barrier(state)
    else:
        import torch.distributed as dist

        dist.barrier(group=group)


def node_of(state: RunState) -> int:
    """The first rank of this process's machine (torchrun numbers a machine's ranks in a row)."""
    return state.rank - state.local_rank
