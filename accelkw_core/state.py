"""``PartialState`` and ``AcceleratorState``: this process's run, as Accelerate's ``accelerate.state``.

Accelerate's two classes are shared-state singletons: once an ``Accelerator`` exists, every
``AcceleratorState()`` anywhere in the process describes that run. Here each instance is a view
of the newest ``Accelerator``'s state (:func:`accelkw_core.runtime.state.current_state`), so
``AcceleratorState().num_processes`` in a helper module reads the run its script started. Before
any ``Accelerator``, a ``PartialState()`` reads the variables torchrun sets (``RANK``,
``WORLD_SIZE``, ...); unlike Accelerate's it does not start a process group (the run's handlers
do, when the ``Accelerator`` is built).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkw_core.runtime import collectives
from accelkw_core.runtime.processes.coordination import (
    DistributedType,
    distributed_type,
    goes_first,
    on_process,
)
from accelkw_core.runtime.state import RunState, current_state

if TYPE_CHECKING:
    import torch

__all__ = ["AcceleratorState", "PartialState", "is_initialized", "state_exists"]

# Whether a PartialState() was made: Accelerate's logger refuses to log before one (or an
# Accelerator) exists, and accelkw's follows it.
_partial_made: list[bool] = []


def is_initialized() -> bool:
    """Whether an ``Accelerator`` exists in this process (Accelerate's ``is_initialized``)."""
    return current_state() is not None


def state_exists() -> bool:
    """Whether this process made an ``Accelerator`` or a ``PartialState()``."""
    return bool(_partial_made) or is_initialized()


class PartialState:
    """The facts of this process: rank, world size, device; its turns and barrier.

    ``cpu=True`` (before any ``Accelerator``) reports the CPU as the device.
    """

    def __init__(self, cpu: bool = False) -> None:
        self._cpu = cpu
        _partial_made[:] = [True]

    @property
    def _run(self) -> RunState:
        run = current_state()
        return run if run is not None else RunState.from_env(cpu=self._cpu)

    @property
    def initialized(self) -> bool:
        """Always ``True``: an instance exists."""
        return True

    @property
    def num_processes(self) -> int:
        return self._run.world_size

    @property
    def process_index(self) -> int:
        return self._run.rank

    @property
    def local_process_index(self) -> int:
        return self._run.local_rank

    @property
    def device(self) -> torch.device:
        return self._run.device

    @property
    def distributed_type(self) -> DistributedType:
        return distributed_type(self._run)

    @property
    def use_distributed(self) -> bool:
        return self._run.distributed

    @property
    def backend(self) -> str | None:
        return self._run.backend

    @property
    def is_main_process(self) -> bool:
        return self._run.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self._run.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self._run.is_last_process

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for with one)."""
        collectives.barrier(self._run)

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first; the others enter once it has left."""
        run = self._run
        with goes_first(run, run.rank == 0):
            yield

    @contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Each machine's local main process runs the block first, then the others."""
        run = self._run
        with goes_first(run, run.local_rank == 0):
            yield

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` made to run on the main process only (``None`` elsewhere)."""
        return on_process(function, lambda: self.is_main_process, "on_main_process")

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.is_main_process:
            print(*args, **kwargs)

    def __repr__(self) -> str:
        # The first lines of the run's description: Accelerate's PartialState stops before the
        # mixed precision.
        return str(self._run).split("\n\nMixed precision type:")[0] + "\n"


class AcceleratorState(PartialState):
    """:class:`PartialState` with the run's settings: ``mixed_precision``, ``deepspeed_plugin``.

    ``str(AcceleratorState())`` is the running ``Accelerator``'s ``str(accelerator.state)``.
    """

    @property
    def mixed_precision(self) -> str:
        return self._run.mixed_precision

    @property
    def deepspeed_plugin(self) -> None:
        """Always ``None``: accelkw runs no DeepSpeed (docs/migrating.md, Out of scope)."""
        return None

    def __repr__(self) -> str:
        return str(self._run)
