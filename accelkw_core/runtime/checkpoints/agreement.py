"""How the processes of a run agree on each stage of a save or a load.

Each stage ends with every process telling the others whether it succeeded (one gather, never a
barrier a failed process would skip): a failure on any process makes every process raise, at
once, rather than the others waiting for the process group's timeout. Without a process group
these are plain local checks. A save committed in the background passes ``group``, a process
group of its own, so its agreement never interleaves with the training's collectives.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import CheckpointError, quoted

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = [
    "agree",
    "alone",
    "barrier",
    "everyone_here",
    "exchange",
    "failures",
    "node_of",
    "prepare_presence_check",
    "raise_agreed",
]


#: Set while a process saves replicated state on its own: its stages agree with no one.
_ALONE: ContextVar[bool] = ContextVar("accelkw_save_alone", default=False)


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Within it, on this thread, every agreement is this process's own (a save of
    replicated state, which the committing process makes without the others)."""
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


def prepare_presence_check(state: RunState) -> None:
    """Make, now, the gloo group :func:`everyone_here` needs on a group of another backend.

    Called as the run is built (every process does that): made at a save instead, a process
    missing from that save would leave the others waiting in the group's creation.
    """
    if _grouped(state):
        _gloo_group()


def everyone_here(state: RunState, what: str) -> None:
    """Check that every process entered ``what`` (a collective call), naming those that did not.

    torch's ``monitored_barrier`` (gloo) reports the ranks that did not reach it within the
    process group's timeout: the main process raises a :class:`CheckpointError` naming them,
    rather than every process waiting in the collectives that follow. On a group of another
    backend (NCCL), on the gloo group :func:`prepare_presence_check` made.
    """
    import torch.distributed as dist

    if not _grouped(state):
        return
    group = _gloo_group()
    try:
        dist.monitored_barrier(group=group, timeout=_timeout_of(group), wait_all_ranks=True)
    except RuntimeError as exc:
        found = _RANKS.search(str(exc))
        named = found[1].replace(",", " ").split() if found else []
        missing = sorted({int(r) for r in named} - {state.rank})
        who = (
            "process " + ", ".join(str(r) for r in missing)
            if missing
            else "another process (" + str(exc).strip().splitlines()[0] + ")"
        )
        raise CheckpointError(
            what,
            f"is a collective, but {who} did not call it: sharded state is saved and loaded "
            "by every process together; call it on every process (not under "
            "`if accelerator.is_main_process:`)",
        ) from exc


# torch's wording: "Ranks 1, 3 failed to pass monitoredBarrier in 10000 ms".
_RANKS = re.compile(r"[Rr]anks?\s+([0-9][0-9,\s]*)\s+failed")
_MONITORS: dict[int, Any] = {}


def _gloo_group() -> Any:
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        return None
    world = dist.group.WORLD
    key = id(world)
    if key not in _MONITORS:
        _MONITORS.clear()  # another run's, whose default group is gone
        _MONITORS[key] = dist.new_group(backend="gloo")
    return _MONITORS[key]


def _timeout_of(group: Any) -> Any:
    """The process group's own timeout (``InitProcessGroupKwargs(timeout=...)``), else
    ``None`` (torch's default for gloo): a process late by less is not reported."""
    import torch
    import torch.distributed as dist

    try:
        pg: Any = dist.group.WORLD if group is None else group
        return pg._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError):
        return None


def node_of(state: RunState) -> int:
    """The first rank of this process's machine (torchrun numbers a machine's ranks in a row)."""
    return state.rank - state.local_rank
