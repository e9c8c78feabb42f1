"""Assembling a run for the ``Accelerator``: its settings, its composed handlers and state, and
the collaborators it forwards to, each handed what it works on.

Settings resolve in Accelerate's order (the code's arguments, the environment, the config
file); the trackers of ``log_with`` are resolved first, so a tracker name nobody installed fails
before anything is composed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkw_core.config.settings import Settings, resolve_settings
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.runtime.accumulation import GradientState
from accelkw_core.runtime.attribute_contributions import Extras
from accelkw_core.runtime.checkpoints.manager import Checkpoints, project_configuration
from accelkw_core.runtime.checkpoints.project import ProjectConfiguration
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.runtime.composing.keywords import handlers_from_keywords
from accelkw_core.runtime.data.dataloader_config import DataLoaderConfiguration
from accelkw_core.runtime.data.loading import DataLoading, dataloader_configuration
from accelkw_core.runtime.preparing.preparation import Preparation
from accelkw_core.runtime.preparing.prepared import Prepared
from accelkw_core.runtime.processes.coordination import Processes
from accelkw_core.runtime.profiling import Profiling
from accelkw_core.runtime.run_state import RunState
from accelkw_core.runtime.shutdown import Shutdown
from accelkw_core.runtime.stepping.training_step import Stepping
from accelkw_core.runtime.trackers import Trackers
from accelkw_core.tracking.selection import LogWith, filter_trackers

if TYPE_CHECKING:
    from accelkw_core.contract.handler import KwargsHandler

__all__ = ["Assembled", "assemble"]


@dataclass(frozen=True)
class Assembled:
    """One run's parts: which share one record of what was prepared (``prepared``)."""

    settings: Settings
    handlers: list[KwargsHandler]
    state: RunState
    gradient_state: GradientState
    registry: Registry
    prepared: Prepared
    data: DataLoading
    preparation: Preparation
    stepping: Stepping
    checkpoints: Checkpoints
    trackers: Trackers
    processes: Processes
    profiling: Profiling
    extras: Extras
    shutdown: Shutdown


def assemble(
    mixed_precision: str | None,
    cpu: bool | None,
    kwargs_handlers: Sequence[KwargsHandler] | None,
    config: str | os.PathLike[str] | None,
    *,
    project_dir: str | os.PathLike[str] | None,
    project_config: ProjectConfiguration | None,
    log_with: LogWith,
    dataloader_config: DataLoaderConfiguration | None,
    registry: Registry | None,
    keywords: dict[str, Any],
) -> Assembled:
    """The run ``Accelerator(...)`` with these arguments describes, composed and ready.

    Its :class:`Shutdown` is registered at interpreter exit from here on; the capability checks
    (:func:`~accelkw_core.runtime.composing.missing_capabilities.check_composed_run`) are the
    caller's, which ends the run when they fail.
    """
    project = project_configuration(project_dir, project_config)
    loaders_config = dataloader_configuration(dataloader_config)
    registry = registry if registry is not None else get_registry()
    # Resolved before anything is composed, so a tracker name nobody installed fails first.
    chosen = filter_trackers(log_with, project.logging_dir, registry)
    handlers = list(kwargs_handlers or ())
    if keywords:
        handlers += handlers_from_keywords(keywords, handlers, registry.handlers())
    settings = resolve_settings(
        handlers, mixed_precision=mixed_precision, cpu=cpu, config=config, registry=registry
    )
    state = RunState.from_env(mixed_precision=settings.mixed_precision, cpu=settings.cpu)
    if settings.config.path is not None:
        state.record("config", f"settings read from {settings.config.label}")
    for note in settings.notes:
        state.record("config", note)
    composed = compose(state, registry=registry, settings=settings)
    progress = _loader_progress()
    gradient_state = GradientState.from_state(state, progress)
    # Built in this order, each handed what it works on; none knows the Accelerator.
    prepared = Prepared()
    data = DataLoading(state, progress, loaders_config)
    preparation = Preparation(state, gradient_state, prepared, data)
    stepping = Stepping(state, gradient_state, prepared)
    checkpoints = Checkpoints(state, gradient_state, prepared, project)
    trackers = Trackers(state, chosen, registry)
    processes = Processes(state)
    profiling = Profiling(state)
    extras = Extras(state)
    return Assembled(
        settings=settings,
        handlers=composed,
        state=state,
        gradient_state=gradient_state,
        registry=registry,
        prepared=prepared,
        data=data,
        preparation=preparation,
        stepping=stepping,
        checkpoints=checkpoints,
        trackers=trackers,
        processes=processes,
        profiling=profiling,
        extras=extras,
        shutdown=Shutdown(state, checkpoints, trackers),
    )


def _loader_progress() -> Any:
    # The data loader module imports torch; the Accelerator's modules do not.
    from accelkw_core.runtime.data.data_loader import LoaderProgress

    return LoaderProgress()
