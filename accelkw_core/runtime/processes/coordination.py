"""The run's processes: which kind of run this is, and how its processes take turns or share work.

``DistributedType`` is Accelerate's enum, defined by the core (served from
``accelkw_core.utils``); ``split_inputs``, ``goes_first`` and ``on_process`` carry Accelerate's
semantics for the ``Accelerator`` methods of the same purpose. :class:`Processes` is the
``Accelerator``'s collaborator for them, and for gathering, reducing, waiting and triggers.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError
from accelkw_core.runtime import collectives as ops
from accelkw_core.runtime.kinds import DistributedType, distributed_type

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = [
    "DistributedType",
    "Processes",
    "distributed_type",
    "goes_first",
    "on_process",
    "split_inputs",
]


@contextmanager
def goes_first(state: RunState, first: bool) -> Iterator[None]:
    """The block runs on the processes with ``first`` set, then on the others (barriers)."""
    if not first:
        ops.barrier(state)
    yield
    if first:
        ops.barrier(state)


def on_process(
    function: Callable[..., Any] | None, chosen: Callable[[], bool], what: str
) -> Callable[..., Any]:
    """``function`` wrapped to run only where ``chosen()`` is true (``None`` elsewhere)."""
    if function is None or not callable(function):
        raise ConfigError(
            "accelerator",
            what,
            function,
            f"a function to decorate (@accelerator.{what}, or accelerator.{what}(fn))",
        )

    @functools.wraps(function)
    def inner(*args: Any, **kwargs: Any) -> Any:
        if chosen():
            return function(*args, **kwargs)
        return None

    return inner


def split_inputs(inputs: Any, state: RunState, apply_padding: bool = False) -> Any:
    """This process's contiguous share of ``inputs`` (a list, tuple, tensor, or dict of them).

    The first ``len % num_processes`` processes get one element more; with ``apply_padding``
    the others repeat the last element so every share has the same length.
    """
    n, rank = state.world_size, state.rank
    if n == 1:
        return inputs
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ValueError("All values in the dictionary must have the same length")
        length = lengths.pop() if lengths else 0
    else:
        length = len(inputs)
    per, extra = divmod(length, n)
    start = rank * per + min(rank, extra)
    end = start + per + (1 if rank < extra else 0)
    target = per + (1 if extra else 0)

    def cut(values: Any) -> Any:
        if isinstance(values, dict):
            return type(values)({k: cut(v) for k, v in values.items()})
        if not isinstance(values, list | tuple) and not hasattr(values, "shape"):
            return values
        share = values[start:end]
        if apply_padding and len(share) < target and length:
            missing = target - len(share)
            if hasattr(share, "shape"):
                import torch

                share = torch.cat([share, values[-1:].expand(missing, *values.shape[1:])])
            else:
                share = share + type(share)([values[-1]] * missing)
        return share

    return cut(inputs)


class Processes:
    """The processes of one run (``state``'s rank and world): collectives, turns, triggers."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        # This process's trigger (a 0-d tensor once set or checked); see set_trigger.
        self._flag: Any = None

    @property
    def distributed_type(self) -> DistributedType:
        """``NO``, ``MULTI_CPU``, ``MULTI_GPU``, ... (Accelerate's ``DistributedType``)."""
        return distributed_type(self.state)

    @property
    def use_distributed(self) -> bool:
        """Whether this run has several processes."""
        return self.state.distributed and self.distributed_type != DistributedType.NO

    # -- collectives -----------------------------------------------------------------------------

    def gather(self, data: Any) -> Any:
        """Tensors of every process concatenated on dim 0 (nested lists/tuples/dicts too)."""
        return ops.gather(data, self.state)

    def reduce(self, tensor: Any, reduction: str, scale: float) -> Any:
        """The ``reduction`` of ``tensor`` over every process, as a new tensor."""
        import torch

        if reduction in ops.REDUCTIONS and isinstance(tensor, torch.Tensor):
            return ops.reduce(tensor, reduction, self.state)
        from accelkw_core.runtime.processes.operations import reduce

        return reduce(tensor, reduction, scale)

    def barrier(self) -> None:
        """Block until every process reaches this call."""
        ops.barrier(self.state)

    def pad_across_processes(self, tensor: Any, dim: int, pad_index: int, pad_first: bool) -> Any:
        """``tensor`` (or nested tensors) padded along ``dim`` to the largest size on any process."""
        from accelkw_core.runtime.processes.operations import pad_across_processes

        return pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.state.rank == 0:
            print(*args, **kwargs)

    def save(self, obj: Any, f: Any, safe_serialization: bool, on_each_node: bool) -> None:
        """Write ``obj`` to ``f`` from the main process only, or from each machine's local main
        with ``on_each_node`` (``ProjectConfiguration.save_on_each_node``)."""
        from accelkw_core.runtime.checkpoints.pretrained import save_object

        writes = self.state.local_rank == 0 if on_each_node else self.state.rank == 0
        if writes:
            save_object(obj, f, safe_serialization=safe_serialization)

    # -- triggers --------------------------------------------------------------------------------

    def set_trigger(self) -> None:
        """Raise this process's trigger."""
        import torch

        self._flag = torch.tensor(1, device=self.state.device)

    def check_trigger(self) -> bool:
        """Whether any process raised its trigger since the last check that saw one (lowers them)."""
        import torch

        flag = self._flag
        if flag is None:
            flag = torch.tensor(0, device=self.state.device)
        if ops.reduce(flag, "sum", self.state).item() >= 1:
            self._flag = torch.tensor(0, device=self.state.device)
            return True
        self._flag = flag
        return False

    # -- turns and shares ------------------------------------------------------------------------

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first; the others enter once it has left."""
        with goes_first(self.state, self.state.rank == 0):
            yield

    @contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """The local main process of each machine runs the block first, then the others."""
        with goes_first(self.state, self.state.local_rank == 0):
            yield

    def on_main_process(self, function: Callable[..., Any] | None) -> Callable[..., Any]:
        """``function`` made to run on the main process only (``None`` elsewhere)."""
        return on_process(function, lambda: self.state.rank == 0, "on_main_process")

    def on_local_main_process(self, function: Callable[..., Any] | None) -> Callable[..., Any]:
        """``function`` made to run on each machine's local main process only."""
        return on_process(function, lambda: self.state.local_rank == 0, "on_local_main_process")

    def on_process(
        self, function: Callable[..., Any] | None, process_index: int | None, local: bool
    ) -> Callable[..., Any]:
        """``function`` made to run on the process of that (local with ``local``) index only.

        With ``function`` ``None`` and an index, the decorator for that index
        (``@accelerator.on_process(process_index=1)``).
        """
        what = "on_local_process" if local else "on_process"
        if function is None and process_index is not None:
            return lambda fn: self.on_process(fn, process_index, local)
        field = "local_process_index" if local else "process_index"
        if process_index is None:
            raise ConfigError(
                "accelerator", field, None, f"the index of the process to run on ({what})"
            )

        def chosen() -> bool:
            return (self.state.local_rank if local else self.state.rank) == process_index

        return on_process(function, chosen, what)

    def on_last_process(self, function: Callable[..., Any] | None) -> Callable[..., Any]:
        """``function`` made to run on the last process only (``None`` elsewhere)."""
        return on_process(
            function, lambda: self.state.rank == self.state.world_size - 1, "on_last_process"
        )

    @contextmanager
    def join_uneven_inputs(
        self, joinables: list[Any], even_batches: bool, loaders: list[Any]
    ) -> Iterator[list[Any]]:
        """The block under ``torch.distributed.algorithms.Join`` when batches may be uneven.

        As in Accelerate, only on several accelerator devices (CUDA, ...): there
        ``even_batches`` overrides the prepared ``loaders``' for the block, and Join is on
        when batches are uneven. With one process the block runs as it is; on several CPU
        processes too, with Accelerate's warning (its join is for accelerator devices only).
        """
        if not self.state.distributed or self.state.device_type == "cpu":
            if self.state.distributed:
                warnings.warn(
                    "join_uneven_inputs has no effect on CPU processes (as in Accelerate, it "
                    "joins uneven inputs on accelerator devices only)",
                    # this generator, contextlib's __enter__, the caller's ``with`` line
                    stacklevel=3,
                )
            yield joinables
            return
        from torch.distributed.algorithms.join import Join

        shards: list[Any] = [
            loader.batch_sampler
            for loader in loaders
            if hasattr(getattr(loader, "batch_sampler", None), "even_batches")
        ]
        before = [s.even_batches for s in shards]
        for shard in shards:
            shard.even_batches = even_batches
        try:
            with Join(joinables, enable=not even_batches, throw_on_early_termination=False):
                yield joinables
        finally:
            for shard, value in zip(shards, before, strict=True):
                shard.even_batches = value

    @contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool) -> Iterator[Any]:
        """This process's contiguous share of ``inputs``."""
        yield split_inputs(inputs, self.state, apply_padding)
