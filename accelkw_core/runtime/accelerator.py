"""``Accelerator``: the training-loop API over a state composed from handlers and configuration.

Nothing here imports torch at module import time; every method that needs it imports it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from accelkw_core.config.settings import Settings, resolve_settings
from accelkw_core.contract.points import (
    ATTRIBUTE,
    BACKWARD,
    FORWARD_CONTEXT,
    LOSS,
    PROFILER,
    ExtensionPoint,
)
from accelkw_core.discovery.catalog import provider_hint
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import AccelkwError, ComposeError
from accelkw_core.logs import configure_from_env
from accelkw_core.runtime import collectives as ops
from accelkw_core.runtime.accumulation import AccumulationAPI, GradientState
from accelkw_core.runtime.checkpoints.project import ProjectConfiguration
from accelkw_core.runtime.composition import compose
from accelkw_core.runtime.dataloader_config import DataLoaderConfiguration
from accelkw_core.runtime.forward import forward_contexts
from accelkw_core.runtime.gaps import gaps_of_run, live_capabilities, warn_gaps
from accelkw_core.runtime.keywords import handlers_from_keywords
from accelkw_core.runtime.preparing import PreparingAPI
from accelkw_core.runtime.saving import CheckpointAPI, project_configuration
from accelkw_core.runtime.state import AcceleratorState
from accelkw_core.runtime.surface import AccelerateSurface
from accelkw_core.runtime.trackers import TrackingAPI
from accelkw_core.tracking.selection import LogWith

if TYPE_CHECKING:
    import torch

    from accelkw_core.contract.handler import KwargsHandler

__all__ = ["HANDLER_ATTRIBUTES", "Accelerator", "NoProfiler"]

T = TypeVar("T")

# Accelerate's attributes that a handler supplies through the ``attribute`` point.
HANDLER_ATTRIBUTES = frozenset({"scaler"})


class NoProfiler:
    """What ``Accelerator.profile()`` yields when no profiler is configured: ``step()`` does nothing."""

    def step(self) -> None:
        """Nothing to advance."""


class Accelerator(PreparingAPI, AccumulationAPI, CheckpointAPI, TrackingAPI, AccelerateSurface):
    """Compose the installed handlers, the config and the code's handlers into one run.

    ``mixed_precision`` (``"no"``, ``"fp16"``, ``"bf16"``) and ``cpu`` left at ``None`` come from
    ``ACCELKW_MIXED_PRECISION``/``ACCELKW_CPU``, then the config file, then ``"no"``/``False``.
    ``kwargs_handlers`` are handler instances; their explicit fields win over the environment
    and the config (``config``: a path; otherwise ``ACCELKW_CONFIG``, ``./accelkw.toml`` or
    ``./pyproject.toml [tool.accelkw]``). Every other enabled installed handler is applied with
    its configured or default values. ``registry`` replaces the process-wide plugin registry.
    ``project_dir``/``project_config`` (a :class:`ProjectConfiguration`) place checkpoints and
    logs, as in Accelerate. ``dataloader_config`` (a :class:`DataLoaderConfiguration`) says how
    prepared data loaders shard. ``log_with`` names installed trackers (``"tensorboard"``, a list,
    ``"all"``) or passes ``GeneralTracker`` instances; see :meth:`init_trackers`.

    Other keywords are Accelerate's (``gradient_accumulation_steps=4``, ``fsdp_plugin=...``,
    ``dynamo_backend="inductor"``): each is taken by the installed handler that claims it
    (``accelerator_keywords``), and one no handler claims names the distribution to install.

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
        project_dir: str | os.PathLike[str] | None = None,
        project_config: ProjectConfiguration | None = None,
        log_with: LogWith = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        registry: Registry | None = None,
        **keywords: Any,
    ) -> None:
        configure_from_env()
        self.project_configuration = project_configuration(project_dir, project_config)
        self.dataloader_config = _dataloader_config(dataloader_config)
        registry = registry if registry is not None else get_registry()
        self._choose_trackers(log_with, registry)
        handlers = list(kwargs_handlers or ())
        if keywords:
            handlers += handlers_from_keywords(keywords, handlers, registry.handlers())
        self.settings: Settings = resolve_settings(
            handlers,
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
        self.handlers: list[KwargsHandler] = compose(
            state, registry=registry, settings=self.settings
        )
        self.state = state
        self.gradient_state = GradientState.from_state(state, _loader_progress())
        self._ended = False
        self._models: list[tuple[Any, Any]] = []
        self._warned_no_profiler = False
        # An Accelerator nobody ended still undoes its handlers (a process group) once, at exit.
        self._atexit = _teardown_at_exit(self)
        try:
            self._check_attributes()
            gaps = gaps_of_run(state, live_capabilities(state), registry, self.settings.disabled)
            warn_gaps(state, gaps)
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

    # -- the loop ------------------------------------------------------------------------------

    def autocast(self, autocast_handler: Any = None) -> AbstractContextManager[Any]:
        """The forward contexts (autocast) around a block; nothing to enter when none applies.

        ``autocast_handler`` (a handler such as ``AutocastKwargs(enabled=False)``) replaces
        them for this block: its plan on this run's facts gives the contexts to enter.
        """
        if autocast_handler is None:
            factories = self._values(FORWARD_CONTEXT)
            if len(factories) == 1:  # the common case, kept to one call on a hot path
                return factories[0]()
            return forward_contexts(factories)
        return forward_contexts(self._override(autocast_handler, FORWARD_CONTEXT, "autocast"))

    def _override(self, handler: Any, point: ExtensionPoint[T], what: str) -> list[T]:
        from accelkw_core.contract.handler import KwargsHandler

        if not isinstance(handler, KwargsHandler):
            raise TypeError(
                f"{what}: got {type(handler).__name__}, expected a handler instance that "
                f"contributes to the {point.name!r} extension point"
            )
        scratch = self.state.scratch()
        handler.plan(scratch).carry_out(scratch)
        return scratch.values(point)

    def backward(self, loss: Any, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, or the ``backward`` contribution (loss scaling).

        The loss is divided by :attr:`gradient_accumulation_steps` first, as in Accelerate,
        then passed through every ``loss`` contribution in composition order (observers and
        transforms, on every rank), then backpropagated.
        """
        steps = self.gradient_state.num_steps
        if steps != 1:
            loss = loss / steps
        for transform in self._values(LOSS):
            loss = transform(loss)
        contributed = self._values(BACKWARD)
        if contributed:
            contributed[0](loss, **kwargs)
        else:
            loss.backward(**kwargs)

    def _values(self, point: ExtensionPoint[T]) -> tuple[T, ...]:
        # The hot paths (backward, autocast) read points once per state version, not per call.
        state = self.state
        cache: tuple[int, dict[str, tuple[Any, ...]]] | None = self.__dict__.get("_point_cache")
        if cache is None or cache[0] != state.version:
            cache = (state.version, {})
            self.__dict__["_point_cache"] = cache
        values: tuple[T, ...] | None = cache[1].get(point.name)
        if values is None:
            values = cache[1][point.name] = tuple(state.values(point))
        return values

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The gradient scaler a handler contributes (Accelerate's ``accelerator.scaler``)."""
        found = self.state.keyed(ATTRIBUTE).get("scaler")
        if found is None:
            return None
        import torch

        if isinstance(found, torch.amp.GradScaler):
            return found
        raise TypeError(
            f"accelerator.scaler: the 'scaler' attribute contribution is a "
            f"{type(found).__name__}, not a torch.amp.GradScaler"
        )

    @property
    def extras(self) -> Mapping[str, object]:
        """What handlers contribute to the ``attribute`` point, by name (read-only).

        A plugin exports a typed accessor over it (``accelkw_ema.ema_of(accelerator)``), or
        code reads it with :meth:`extra`, so a type checker knows what it gets.
        """
        return MappingProxyType(self.state.keyed(ATTRIBUTE))

    def extra(self, name: str, kind: type[T]) -> T:
        """The object a handler contributed as ``name``, checked to be a ``kind``.

        Raises :class:`~accelkw_core.errors.AccelkwError` naming the installed contributions
        when there is none of that name, and ``TypeError`` when it is not a ``kind``.
        """
        found = self.state.keyed(ATTRIBUTE).get(name)
        if found is None:
            have = ", ".join(sorted(self.state.keyed(ATTRIBUTE))) or "none"
            raise AccelkwError(
                f"no handler of this run contributes {name!r} (contributed: {have}); "
                "install and enable the plugin that provides it"
            )
        if not isinstance(found, kind):
            raise TypeError(
                f"accelerator.extra({name!r}) is a {type(found).__name__}, not a {kind.__name__}"
            )
        return found

    def _check_attributes(self) -> None:
        # A contribution named like a real attribute would be unreachable, or shadow it.
        for contribution in self.state.contributions(ATTRIBUTE):
            key = str(contribution.key)
            if key not in HANDLER_ATTRIBUTES and hasattr(type(self), key):
                raise ComposeError(
                    f"handler {contribution.handler!r} contributes an attribute named {key!r}, "
                    f"which is already Accelerator.{key}; choose another name"
                )

    @contextlib.contextmanager
    def profile(self, profile_handler: Any = None) -> Iterator[Any]:
        """Profile the block; yields the profiler (call ``.step()`` once per training step).

        ``profile_handler`` replaces the configured profiler for this block. With no profiler
        configured the block runs unprofiled, with a warning, and ``step()`` does nothing.
        """
        if profile_handler is not None:
            factories = self._override(profile_handler, PROFILER, "profile")
        else:
            factories = self.state.values(PROFILER)
        if factories:
            manager: AbstractContextManager[Any] = factories[0]()
        else:
            if not self._warned_no_profiler:
                self._warned_no_profiler = True
                message = (
                    "profile(): no profiler is configured, so the block runs unprofiled "
                    f"({provider_hint('profiler')}, or pass profile_handler=)"
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

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """The ``"sum"``, ``"mean"`` or ``"max"`` of ``tensor`` over every process, as a new tensor.

        Nested lists, tuples and dicts of tensors are reduced leaf by leaf; ``scale`` applies
        on XLA only, as in Accelerate (accelkw does not run on XLA).
        """
        import torch

        if reduction in ops.REDUCTIONS and isinstance(tensor, torch.Tensor):
            return ops.reduce(tensor, reduction, self.state)
        from accelkw_core.runtime.operations import reduce

        return reduce(tensor, reduction, scale)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (and this process's saves are committed)."""
        self.wait_for_checkpoints()
        ops.barrier(self.state)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.state.rank == 0:
            print(*args, **kwargs)

    # -- shutdown ------------------------------------------------------------------------------

    def end_training(self) -> None:
        """Finish the trackers, then run every handler's teardown in reverse order, once.

        Later calls do nothing. A tracker whose ``finish`` raises does not stop the others or
        the teardowns; the first such error is raised once they have run, as Accelerate
        raises it.
        """
        if self._ended:
            return
        self._ended = True
        atexit.unregister(self._atexit)
        # Pending saves first: a teardown may destroy the process group they agree on.
        saving_failure: BaseException | None = None
        try:
            self.wait_for_checkpoints()
        except Exception as failed:
            saving_failure = failed
        tracker_failures = self._finish_trackers()
        for name, exc in self.state.run_teardowns():
            warnings.warn(
                f"teardown of handler {name!r} failed: {type(exc).__name__}: {exc}", stacklevel=2
            )
        if saving_failure is not None:
            raise saving_failure
        if tracker_failures:
            raise tracker_failures[0][1]

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


def _dataloader_config(config: Any) -> DataLoaderConfiguration:
    if config is None:
        return DataLoaderConfiguration()
    if not isinstance(config, DataLoaderConfiguration):
        from accelkw_core.errors import ConfigError

        raise ConfigError(
            "accelerator", "dataloader_config", config, "a DataLoaderConfiguration or None"
        )
    return config


def _loader_progress() -> Any:
    from accelkw_core.runtime.data_loader import LoaderProgress

    return LoaderProgress()


def _teardown_at_exit(accelerator: Accelerator) -> Any:
    # A weak reference: registering must not keep the Accelerator (and its models) alive.
    ref = weakref.ref(accelerator)

    def run() -> None:
        live = ref()
        if live is not None:
            live.end_training()

    atexit.register(run)
    return run
