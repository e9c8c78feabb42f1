"""Which trackers a run logs to: ``Accelerator(log_with=...)`` resolved against the installed ones.

Accelerate's ``filter_trackers`` over the registry instead of a fixed table: a name is any
installed tracker plugin's, ``"all"`` is every installed tracker, and ``GeneralTracker``
instances pass through as they are. Unlike Accelerate, a name that no installed plugin
provides is an error with the pip line (Accelerate skips a known tracker whose package is
missing, with a debug message): a run that asked to log never runs unlogged by surprise.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

from accelkw_core.contract.enums import ReferenceEnum
from accelkw_core.contract.tracker import GeneralTracker
from accelkw_core.discovery.catalog import TRACKER_DISTRIBUTIONS, tracker_install_hint
from accelkw_core.discovery.records import LOADED
from accelkw_core.errors import ConfigError, suggest

if TYPE_CHECKING:
    from accelkw_core.discovery.registry import Registry

__all__ = ["ALL", "LogWith", "LoggerType", "TrackerChoice", "filter_trackers"]

ALL = "all"


class LoggerType(ReferenceEnum):
    """Accelerate's ``LoggerType``: its tracker names as an enum (``log_with=LoggerType.ALL``).

    Only spelling: whether a name can be used depends on the installed tracker plugins, and
    any installed tracker's name works as a plain string too.
    """

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"


#: One entry of ``log_with``: a tracker name (or an enum whose value is one, such as
#: Accelerate's ``LoggerType``) or a tracker instance.
TrackerChoice: TypeAlias = str | enum.Enum | GeneralTracker
#: What ``Accelerator(log_with=...)`` takes: one choice, a list of them, or ``None``.
LogWith: TypeAlias = TrackerChoice | Sequence[TrackerChoice] | None


def _name_of(choice: object) -> str | None:
    if isinstance(choice, enum.Enum):  # LoggerType (a str too): its value is the name
        return choice.value if isinstance(choice.value, str) else None
    if isinstance(choice, str):
        return choice
    return None


def _failed_plugin(registry: Registry, tracker: str) -> str | None:
    """What went wrong with the installed plugin that would provide ``tracker``, if one did.

    A plugin that failed to load registered no tracker, so it is found by what can be known
    without loading it: its plugin (entry-point) name, or the catalog's distribution for a
    built-in tracker name.
    """
    dist = TRACKER_DISTRIBUTIONS.get(tracker)
    for record in registry.plugins():
        if record.status == LOADED:
            continue
        if record.name == tracker or (dist is not None and record.distribution == dist):
            source = f" from {record.distribution}" if record.distribution else ""
            kind = record.error["type"] if record.error else record.status
            return (
                f"the plugin {record.name!r}{source} is installed but {record.status}: "
                f"{kind}: {record.reason}"
            )
    return None


def filter_trackers(
    log_with: LogWith,
    logging_dir: str | os.PathLike[str] | None = None,
    registry: Registry | None = None,
) -> list[str | GeneralTracker]:
    """The trackers ``log_with`` asks for: installed tracker names and tracker instances.

    ``"all"`` (alone or in a list) stands for every installed tracker, after the instances
    listed with it. A name given twice counts once. Raises a ``ConfigError`` (a
    ``ValueError``) for a name no installed plugin provides (with the pip line), for an entry
    that is neither a name nor a ``GeneralTracker`` instance, and, as Accelerate, for a
    tracker that needs a logging folder when ``logging_dir`` is ``None``.
    """
    if log_with is None:
        return []
    choices: Sequence[object]
    choices = log_with if isinstance(log_with, (list, tuple)) else [log_with]
    if registry is None:
        from accelkw_core.discovery.default_registry import get_registry

        registry = get_registry()
    installed = {name: info.cls for name, info in registry.trackers().items()}
    names = [_name_of(choice) for choice in choices]
    if ALL in names:
        wanted = [name for name in installed]
        out: list[str | GeneralTracker] = [c for c in choices if isinstance(c, GeneralTracker)]
    else:
        wanted = []
        out = []
        for choice, name in zip(choices, names, strict=True):
            if isinstance(choice, GeneralTracker):
                out.append(choice)
            elif name is None:
                raise ConfigError(
                    "accelerator",
                    "log_with",
                    choice,
                    "a tracker name, 'all' or a GeneralTracker instance (or a list of them)",
                )
            elif name not in installed:
                have = ", ".join(sorted(installed)) or "none"
                broken = _failed_plugin(registry, name)
                hint = tracker_install_hint(name) if broken is None else broken
                raise ConfigError(
                    "accelerator",
                    "log_with",
                    name,
                    f"an installed tracker ({hint}; installed: {have})",
                    suggestion=suggest(name, installed),
                )
            else:
                wanted.append(name)
    for name in wanted:
        if name in out:
            continue
        if installed[name].requires_logging_directory and logging_dir is None:
            raise ConfigError(
                "accelerator",
                "log_with",
                name,
                f"a logging folder: the {name!r} tracker writes files, so pass "
                "project_dir= or ProjectConfiguration(logging_dir=...)",
            )
        out.append(name)
    return out
