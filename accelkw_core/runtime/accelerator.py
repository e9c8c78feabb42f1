"""``Accelerator``: the training-loop API over a state composed from handlers and configuration.

Nothing here imports torch at module import time; every method that needs it imports it.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from accelkw_core.config.settings import Settings, resolve_settings
from accelkw_core.discovery.catalog import install_hint
from accelkw_core.discovery.registry import Registry, get_registry
from accelkw_core.errors import AccelkwError
from accelkw_core.runtime import collectives as ops
from accelkw_core.runtime.composition import compose
from accelkw_core.runtime.gaps import gaps_after_apply, warn_gaps
from accelkw_core.runtime.state import AcceleratorState

if TYPE_CHECKING:
    import torch

    from accelkw_core.handlers.base import KwargsHandler

__all__ = ["Accelerator", "NoProfiler"]


class NoProfiler:
    """What ``Accelerator.profile()`` yields when no profiler is configured: ``step()`` does nothing."""

    def step(self) -> None:
        """Nothing to advance."""


class Accelerator:
    """Compose the installed handlers, the config and the code's handlers into one run.

    ``mixed_precision`` (``"no"``, ``"fp16"``, ``"bf16"``) and ``cpu`` left at ``None`` come from
    ``ACCELKW_MIXED_PRECISION``/``ACCELKW_CPU``, then the config file, then ``"no"``/``False``.
    ``kwargs_handlers`` are handler instances; their explicit fields win over the environment
    and the config (``config``: a path; otherwise ``ACCELKW_CONFIG``, ``./accelkw.toml`` or
    ``./pyproject.toml [tool.accelkw]``). Every other enabled installed handler is applied with
    its configured or default values. ``registry`` replaces the process-wide plugin registry.

    Use it as a context manager, or call :meth:`end_training`, to run every teardown once
    (a process group a handler created is destroyed).
    """

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool | None = None,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        config: str | os.PathLike[str] | None = None,
        *,
        registry: Registry | None = None,
    ) -> None:
        registry = registry if registry is not None else get_registry()
        self.settings: Settings = resolve_settings(
            kwargs_handlers or (),
            mixed_precision=mixed_precision,
            cpu=cpu,
            config=config,
            registry=registry,
        )
        state = AcceleratorState.from_env(
            mixed_precision=self.settings.mixed_precision, cpu=self.settings.cpu
        )
        if self.settings.config.path is not None:
            state.record("config", f"settings read from {self.settings.config.label}")
        for note in self.settings.notes:
            state.record("config", note)
        handlers = [s.handler for s in self.settings.handlers]
        self.handlers: list[KwargsHandler] = compose(
            state, handlers, registry=registry, include_defaults=False
        )
        self.state = state
        self._ended = False
        self._models: list[tuple[Any, Any]] = []
        self._warned_no_profiler = False
        try:
            warn_gaps(state, gaps_after_apply(state, registry.handlers(), self.settings.disabled))
        except BaseException:
            self.end_training()
            raise

    # -- facts ---------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """The device of this process (``cpu``, or ``cuda:LOCAL_RANK``)."""
        return self.state.device

    @property
    def mixed_precision(self) -> str:
        return self.state.mixed_precision

    @property
    def process_index(self) -> int:
        """The global rank of this process."""
        return self.state.rank

    @property
    def local_process_index(self) -> int:
        """The rank of this process on its machine."""
        return self.state.local_rank

    @property
    def num_processes(self) -> int:
        """The world size."""
        return self.state.world_size

    @property
    def is_main_process(self) -> bool:
        """Whether this is global rank 0."""
        return self.state.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is rank 0 on its machine."""
        return self.state.local_rank == 0

    # -- preparing objects ---------------------------------------------------------------------

    def prepare(self, *objects: Any) -> Any:
        """Prepare models, optimizers and data loaders for this run; other objects pass through.

        Models move to :attr:`device` and through each handler's wrapper in order (DDP when the
        ``ddp`` plugin applies); optimizers step through the gradient scaler when there is one;
        data loaders are sharded across processes. Returns one object for one argument, else a
        tuple in the order given.
        """
        prepared = tuple(self._prepare_one(obj) for obj in objects)
        return prepared[0] if len(prepared) == 1 else prepared

    def _prepare_one(self, obj: Any) -> Any:
        import torch

        from accelkw_core.runtime.data_loader import PreparedDataLoader, prepare_data_loader
        from accelkw_core.runtime.optimizer import AcceleratedOptimizer

        if isinstance(obj, torch.nn.Module):
            return self.prepare_model(obj)
        if isinstance(obj, AcceleratedOptimizer | PreparedDataLoader):
            return obj
        if isinstance(obj, torch.optim.Optimizer):
            return AcceleratedOptimizer(obj, scaler=self.state.grad_scaler)
        if isinstance(obj, torch.utils.data.DataLoader):
            return prepare_data_loader(obj, self.state)
        return obj

    def prepare_model(self, model: Any) -> Any:
        """``model`` on :attr:`device`, passed through every handler's model wrapper in order."""
        original = model.to(self.state.device)
        wrapped = original
        for name, wrap in self.state.model_wrappers:
            try:
                wrapped = wrap(wrapped)
            except Exception as exc:
                raise AccelkwError(
                    f"prepare: the model wrapper of handler {name!r} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        self._models.append((wrapped, original))
        return wrapped

    def unwrap_model(self, model: Any) -> Any:
        """The model as it was before the handlers' wrappers (DDP, ...) were applied."""
        for wrapped, original in self._models:
            if wrapped is model:
                return original
        # Not prepared here: peel the usual wrappers (DDP, DataParallel, torch.compile).
        while True:
            inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
            if inner is None:
                return model
            model = inner

    # -- the loop ------------------------------------------------------------------------------

    def autocast(self, autocast_handler: Any = None) -> AbstractContextManager[Any]:
        """The autocast context for forward passes (nothing to do with mixed precision ``"no"``).

        ``autocast_handler`` replaces the configured autocast settings for this block.
        """
        if autocast_handler is None:
            factory = self.state.autocast_factory
            return factory() if factory is not None else contextlib.nullcontext()
        context = getattr(autocast_handler, "context", None)
        if context is None:
            raise TypeError(
                f"autocast: got {type(autocast_handler).__name__}, expected a handler with "
                "context(state) such as AutocastKwargs(...)"
            )
        result: AbstractContextManager[Any] = context(self.state)
        return result

    def backward(self, loss: Any, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, scaled first by the gradient scaler when there is one."""
        scaler = self.state.grad_scaler
        if scaler is not None:
            scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    @contextlib.contextmanager
    def profile(self, profile_handler: Any = None) -> Iterator[Any]:
        """Profile the block; yields the profiler (call ``.step()`` once per training step).

        ``profile_handler`` replaces the configured profiler for this block. With no profiler
        configured the block runs unprofiled, with a warning, and ``step()`` does nothing.
        """
        if profile_handler is not None:
            context = getattr(profile_handler, "context", None)
            if context is None:
                raise TypeError(
                    f"profile: got {type(profile_handler).__name__}, expected a handler with "
                    "context(state) such as ProfileKwargs(...)"
                )
            manager: AbstractContextManager[Any] = context(self.state)
        elif self.state.profiler_factory is not None:
            manager = self.state.profiler_factory()
        else:
            if not self._warned_no_profiler:
                self._warned_no_profiler = True
                message = (
                    "profile(): no profiler is configured, so the block runs unprofiled "
                    f"({install_hint('profile')}, or pass profile_handler=)"
                )
                self.state.record("accelerator", message, applied=False)
                warnings.warn(message, stacklevel=3)
            manager = contextlib.nullcontext(NoProfiler())
        with manager as profiler:
            yield profiler
        # Every rank leaves together, so no rank reads a trace another is still writing.
        if self.state.distributed and ops.has_group():
            ops.barrier(self.state)

    # -- collectives ---------------------------------------------------------------------------

    def gather(self, data: Any) -> Any:
        """Tensors of every process concatenated on dim 0 (nested lists/tuples/dicts too)."""
        return ops.gather(data, self.state)

    def reduce(self, tensor: Any, reduction: str = "sum") -> Any:
        """The ``"sum"`` or ``"mean"`` of ``tensor`` over every process, as a new tensor."""
        return ops.reduce(tensor, reduction, self.state)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call."""
        ops.barrier(self.state)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.state.rank == 0:
            print(*args, **kwargs)

    # -- shutdown ------------------------------------------------------------------------------

    def end_training(self) -> None:
        """Run every handler's teardown, in reverse order, once; later calls do nothing."""
        if self._ended:
            return
        self._ended = True
        for name, exc in self.state.run_teardowns():
            warnings.warn(
                f"teardown of handler {name!r} failed: {type(exc).__name__}: {exc}", stacklevel=2
            )

    def __enter__(self) -> Accelerator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end_training()

    def __repr__(self) -> str:
        names = ", ".join(self.state.handlers) or "none"
        return (
            f"Accelerator(rank {self.state.rank}/{self.state.world_size}, "
            f"device {self.state.device_type}, mixed_precision={self.state.mixed_precision!r}, "
            f"handlers: {names})"
        )
