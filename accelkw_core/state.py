"""``PartialState``, ``AcceleratorState`` and ``GradientState``: Accelerate's ``accelerate.state``.

Accelerate's three classes are shared-state singletons: every instance in a process describes
the same run. Here each instance is a view: of the newest ``Accelerator``'s state
(:func:`accelkw_core.runtime.run_state.current_state`) once one exists, else of the run the first
``PartialState()`` set up. That first ``PartialState()`` reads the variables a launcher sets
(``RANK``, ``WORLD_SIZE``, ...) and, on several processes, starts the process group as
Accelerate's does: through the installed handler that provides it
(:func:`~accelkw_core.runtime.composing.process_group_only.compose_process_group`), so a
distributed-inference script needs no ``Accelerator``.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import AccelkwError
from accelkw_core.facts.environment import env_flag
from accelkw_core.log_setup import configure_from_env
from accelkw_core.runtime import collectives
from accelkw_core.runtime.accumulation import GradientState as _Gradients
from accelkw_core.runtime.composing.process_group_only import compose_process_group
from accelkw_core.runtime.processes.coordination import (
    DistributedType,
    distributed_type,
    goes_first,
    on_process,
    split_inputs,
)
from accelkw_core.runtime.run_state import RunState, current_gradients, current_state

if TYPE_CHECKING:
    import torch

__all__ = [
    "AcceleratorState",
    "GradientState",
    "PartialState",
    "is_initialized",
    "state_exists",
]

# The run the first PartialState() set up (its process group's teardown on its state), kept
# for the life of the process as Accelerate's shared state is.
_partial: list[RunState] = []


def is_initialized() -> bool:
    """Whether an ``Accelerator`` exists in this process (Accelerate's ``is_initialized``)."""
    return current_state() is not None


def state_exists() -> bool:
    """Whether this process made an ``Accelerator`` or a ``PartialState()``."""
    return bool(_partial) or is_initialized()


def _set_up(cpu: bool, init_kwargs: dict[str, Any]) -> RunState:
    """The process's run before any ``Accelerator``: its facts, and its process group."""
    if _partial:
        return _partial[0]
    configure_from_env()
    run = RunState.from_env(cpu=cpu)
    if run.distributed and not collectives.has_group():
        compose_process_group(run, init_kwargs)
        if run.teardowns:
            # As an Accelerator nobody ended: the group it made is destroyed once, at exit
            # (destroying a group is local: no process waits for another).
            atexit.register(_undo, run)
    _partial[:] = [run]
    return run


def _undo(run: RunState) -> None:
    run.run_teardowns()


class PartialState:
    """The facts of this process (rank, world size, device), its turns, barrier and shares.

    The first ``PartialState()`` of a process (before any ``Accelerator``) sets up the run's
    processes: with several, the process group, through the installed handler that provides
    it; ``kwargs`` (``backend=``, ``timeout=``) go to that handler's fields. ``cpu=True`` runs
    on the CPU even where a GPU is present. Later instances share that run, as Accelerate's do.
    """

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self._cpu = cpu
        if current_state() is None:
            _set_up(cpu, kwargs)

    @classmethod
    def _reset_state(cls) -> None:
        """Forget the run the first ``PartialState()`` set up, undoing what it started (tests do,
        as Accelerate's own tests call its ``_reset_state``)."""
        if _partial:
            _partial.pop().run_teardowns()

    @property
    def _run(self) -> RunState:
        run = current_state()
        if run is not None:
            return run
        return _partial[0] if _partial else _set_up(self._cpu, {})

    # -- facts ---------------------------------------------------------------------------------

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
    def default_device(self) -> torch.device:
        """The device this machine would run on: CUDA when torch sees one, else the CPU."""
        import torch

        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

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
    def debug(self) -> bool:
        """``ACCELERATE_DEBUG_MODE``, as Accelerate reads it (checks before collectives)."""
        return bool(env_flag(os.environ, "ACCELERATE_DEBUG_MODE", handler="state", field="debug"))

    @property
    def fork_launched(self) -> bool:
        """``FORK_LAUNCHED``: set by a launcher that forks (a notebook's); then
        :meth:`destroy_process_group` leaves the default group alone, as Accelerate does."""
        return bool(env_flag(os.environ, "FORK_LAUNCHED", handler="state", field="fork_launched"))

    @property
    def is_main_process(self) -> bool:
        return self._run.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self._run.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self._run.is_last_process

    # -- the processes -------------------------------------------------------------------------

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for with one)."""
        collectives.barrier(self._run)

    def set_device(self) -> None:
        """Make this process's device the current one of its kind (``torch.cuda.set_device``)."""
        device = self.device
        if device.type == "cpu":
            return
        import torch

        module = getattr(torch, device.type, None)
        setter = getattr(module, "set_device", None)
        if setter is not None:
            setter(device)

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group``, by default the default one (what this state set up, undone once).

        Nothing happens to the default group of a fork-launched run, as in Accelerate.
        """
        if self.fork_launched and group is None:
            return
        if group is None and _partial and current_state() is None:
            _partial[0].run_teardowns()
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)

    @contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This process's contiguous share of ``inputs`` (a list, tuple, tensor, or a dict of
        them): the first ``len % num_processes`` processes get one element more; with
        ``apply_padding`` the others repeat the last element, so every share is as long."""
        yield split_inputs(inputs, self._run, apply_padding)

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

    def _chosen(self, here: bool) -> bool:
        # As in Accelerate, a decorated function runs wherever it was aimed, and everywhere
        # on a run of one process (``on_process(process_index=1)`` included).
        return here or not self.use_distributed

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` made to run on the main process only (``None`` elsewhere)."""
        return on_process(function, lambda: self._chosen(self.is_main_process), "on_main_process")

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` made to run on each machine's local main process only."""
        return on_process(
            function, lambda: self._chosen(self.is_local_main_process), "on_local_main_process"
        )

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` made to run on the last process only."""
        return on_process(function, lambda: self._chosen(self.is_last_process), "on_last_process")

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Callable[..., Any]:
        """``function`` made to run on the process ``process_index`` only; without
        ``function``, the decorator (``@state.on_process(process_index=1)``)."""
        if function is None:
            return lambda fn: self.on_process(fn, process_index)
        return on_process(
            function, lambda: self._chosen(self.process_index == process_index), "on_process"
        )

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Callable[..., Any]:
        """``function`` made to run on the process of each machine with that local index only."""
        if function is None:
            return lambda fn: self.on_local_process(fn, local_process_index)
        return on_process(
            function,
            lambda: self._chosen(self.local_process_index == local_process_index),
            "on_local_process",
        )

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each machine's local main process only (Accelerate's)."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def __repr__(self) -> str:
        # The first lines of the run's description: Accelerate's PartialState stops before the
        # mixed precision.
        return str(self._run).split("\n\nMixed precision type:")[0] + "\n"


class AcceleratorState(PartialState):
    """:class:`PartialState` with the run's settings (``mixed_precision``, the plugins).

    ``str(AcceleratorState())`` is the running ``Accelerator``'s ``str(accelerator.state)``.
    A setting Accelerate keeps as a plugin object (``dynamo_plugin``, ``fsdp_plugin``,
    ``torch_tp_plugin``, ``parallelism_config``, ``device_mesh``) is what an installed handler
    contributed to the ``attribute`` point under that name, else ``None``.
    """

    def __init__(
        self, mixed_precision: str | None = None, cpu: bool = False, **kwargs: Any
    ) -> None:
        # Accelerate's signature; the run's settings are the Accelerator's (or the defaults).
        super().__init__(cpu=cpu)

    @property
    def mixed_precision(self) -> str:
        return self._run.mixed_precision

    def _attribute(self, name: str) -> Any:
        return self._run.keyed("attribute").get(name)

    @property
    def dynamo_plugin(self) -> Any:
        return self._attribute("dynamo_plugin")

    @property
    def torch_tp_plugin(self) -> Any:
        return self._attribute("torch_tp_plugin")

    @property
    def parallelism_config(self) -> Any:
        return self._attribute("parallelism_config")

    @property
    def device_mesh(self) -> Any:
        return self._attribute("device_mesh")

    @property
    def fsdp_plugin(self) -> Any:
        """Accelerate sets it on an FSDP run only; here what a handler shares under that name."""
        return self._attribute("fsdp_plugin")

    @property
    def megatron_lm_plugin(self) -> None:
        """Always ``None``: accelkw runs no Megatron-LM (docs/migrating.md, Out of scope)."""
        return None

    @property
    def is_fsdp2(self) -> bool:
        """Whether the run shards its models with FSDP (accelkw's FSDP is FSDP2)."""
        return self.distributed_type == DistributedType.FSDP

    @property
    def deepspeed_plugin(self) -> None:
        """Always ``None``: accelkw runs no DeepSpeed (docs/migrating.md, Out of scope)."""
        return None

    @property
    def deepspeed_plugins(self) -> None:
        """Always ``None``, as :attr:`deepspeed_plugin`."""
        return None

    def get_deepspeed_plugin(self, name: str) -> Any:
        """Raises: no DeepSpeed plugin exists in accelkw (as Accelerate raises off DeepSpeed)."""
        raise AccelkwError(
            f"get_deepspeed_plugin({name!r}): accelkw runs no DeepSpeed (docs/migrating.md)"
        )

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Raises, as :meth:`get_deepspeed_plugin`."""
        raise AccelkwError(
            f"select_deepspeed_plugin({name!r}): accelkw runs no DeepSpeed (docs/migrating.md)"
        )

    def __repr__(self) -> str:
        return str(self._run)


class GradientState:
    """Whether this micro-step syncs gradients, and which prepared loader is iterating.

    A view of the newest ``Accelerator``'s gradient state (before one exists: one micro-step per
    step, no loader), as Accelerate's shared ``GradientState()``.
    ``gradient_accumulation_plugin`` is taken for Accelerate's signature; accumulation is
    configured on the ``Accelerator`` (``gradient_accumulation_steps=``, the plugin's handler).
    """

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        self._plugin = gradient_accumulation_plugin

    @property
    def _state(self) -> _Gradients:
        current = current_gradients()
        return current if current is not None else _Gradients()

    @property
    def initialized(self) -> bool:
        """Always ``True``: an instance exists."""
        return True

    @property
    def sync_gradients(self) -> bool:
        return self._state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self._state.sync_gradients = bool(value)

    @property
    def num_steps(self) -> int:
        return self._state.num_steps

    @property
    def adjust_scheduler(self) -> bool:
        return bool(getattr(self._state.policy, "adjust_scheduler", False))

    @property
    def sync_with_dataloader(self) -> bool:
        return bool(getattr(self._state.policy, "sync_with_dataloader", True))

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation settings, under Accelerate's names."""
        policy = self._state.policy
        return {
            "num_steps": self.num_steps,
            "adjust_scheduler": self.adjust_scheduler,
            "sync_with_dataloader": self.sync_with_dataloader,
            "sync_each_batch": bool(getattr(policy, "sync_each_batch", False)),
        }

    def _loaders(self) -> list[Any]:
        progress = self._state.loaders
        return list(getattr(progress, "active", None) or [])

    @property
    def end_of_dataloader(self) -> bool:
        return self._state.end_of_dataloader

    @property
    def remainder(self) -> int:
        progress = self._state.loaders
        return int(progress.remainder) if progress is not None else -1

    @property
    def active_dataloader(self) -> Any:
        """The innermost prepared data loader being iterated, ``None`` outside any."""
        active = self._loaders()
        return active[-1] if active else None

    @property
    def dataloader_references(self) -> list[Any]:
        """``[None]`` then the prepared loaders being iterated, outermost first (Accelerate's)."""
        return [None, *self._loaders()]

    @property
    def in_dataloader(self) -> bool:
        return bool(self._loaders())

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Always ``False``: accelkw runs no XLA."""
        return False

    def __repr__(self) -> str:
        return repr(self._state)
