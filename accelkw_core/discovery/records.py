"""What the registry knows of each plugin (``PluginRecord``), of each usable handler
(``HandlerInfo``) and tracker (``TrackerInfo``), the statuses, and the checks a handler class and
a tracker class must pass."""

from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.contract.tracker import GeneralTracker

__all__ = [
    "CONFLICT",
    "DISABLED",
    "FAILED",
    "INCOMPATIBLE",
    "LOADED",
    "HandlerInfo",
    "PluginRecord",
    "TrackerInfo",
    "check_handler_class",
    "check_tracker_class",
    "exception_text",
    "normalize_name",
]

LOADED, FAILED, DISABLED, CONFLICT = "loaded", "failed", "disabled", "conflict"
INCOMPATIBLE = "incompatible"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class PluginRecord:
    """What is known about one plugin: where it came from, its status and its handlers.

    A plain class rather than a dataclass: building dataclasses at import time costs
    milliseconds that ``accelkw plugins list`` cannot spare.
    """

    __slots__ = (
        "core_range",
        "distribution",
        "entry_point",
        "error",
        "fix",
        "handlers",
        "load_ms",
        "name",
        "note",
        "plugin",
        "status",
        "trackers",
        "version",
    )

    def __init__(
        self,
        name: str,
        entry_point: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
    ) -> None:
        self.name = name
        self.entry_point = entry_point
        self.distribution = distribution
        self.version = version
        self.status = LOADED
        self.error: dict[str, str] | None = None
        self.load_ms = 0.0
        self.handlers: list[type[KwargsHandler]] = []
        self.trackers: list[type[GeneralTracker]] = []
        self.plugin: object | None = None
        # The distribution's range on accelkw-core (None: it names none), the pip line that
        # makes an incompatible plugin load, and a remark for `plugins show` (no range declared).
        self.core_range: str | None = None
        self.fix: str | None = None
        self.note: str | None = None

    def __repr__(self) -> str:
        return (
            f"PluginRecord(name={self.name!r}, distribution={self.distribution!r}, "
            f"version={self.version!r}, status={self.status!r}, error={self.error!r})"
        )

    def fail(self, status: str, kind: str, message: str) -> None:
        self.status = status
        self.error = {"type": kind, "message": message}

    @property
    def reason(self) -> str:
        return self.error["message"] if self.error else ""

    @property
    def kinds(self) -> list[str]:
        """What the plugin contributes: ``["handler"]``, ``["tracker"]``, both, or none."""
        return [k for k, got in (("handler", self.handlers), ("tracker", self.trackers)) if got]


class HandlerInfo(NamedTuple):
    """A usable handler class and the plugin and distribution that provide it."""

    name: str
    cls: type[KwargsHandler]
    plugin: str
    distribution: str | None
    version: str | None


class TrackerInfo(NamedTuple):
    """A usable tracker class and the plugin and distribution that provide it."""

    name: str
    cls: type[GeneralTracker]
    plugin: str
    distribution: str | None
    version: str | None


def normalize_name(name: str) -> str:
    """``name`` as plugin, handler and distribution names are compared: PEP 503's normal form
    (lowercase, runs of ``-``, ``_`` and ``.`` as one ``-``), so ``Accelkw_DDP`` is ``accelkw-ddp``.
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def check_handler_class(cls: object) -> str | None:
    """Why ``cls`` cannot be a handler, or ``None`` when it can."""
    if not isinstance(cls, type) or not issubclass(cls, KwargsHandler):
        return f"{cls!r} is not a KwargsHandler subclass"
    if not dataclasses.is_dataclass(cls):
        return f"{cls.__name__} is not a dataclass (decorate it with @dataclass)"
    for f in dataclasses.fields(cls):
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            return f"{cls.__name__}.{f.name} has no default (every handler field needs one)"
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not _NAME.match(name):
        return (
            f"{cls.__name__} has no valid registry name (got {name!r}; "
            "expected a lowercase identifier such as 'autocast')"
        )
    return None


def check_tracker_class(cls: object) -> str | None:
    """Why ``cls`` cannot be a tracker, or ``None`` when it can."""
    if not isinstance(cls, type) or not issubclass(cls, GeneralTracker):
        return f"{cls!r} is not a GeneralTracker subclass"
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not _NAME.match(name) or name == "all":
        return (
            f"{cls.__name__} has no valid tracker name (got {name!r}; expected a lowercase "
            "identifier other than 'all', such as 'tensorboard')"
        )
    if not isinstance(getattr(cls, "requires_logging_directory", None), bool):
        return f"{cls.__name__}.requires_logging_directory must be True or False"
    if "tracker" not in dir(cls):
        return f"{cls.__name__} has no `tracker` property (the run or writer it wraps)"
    return None


def exception_text(exc: BaseException) -> str:
    """One line naming what went wrong, for a plugin's recorded reason."""
    if isinstance(exc, SyntaxError):
        return f"{exc.msg} ({exc.filename}, line {exc.lineno})"
    if isinstance(exc, SystemExit):  # str() of SystemExit(3) is a bare "3"
        return f"SystemExit({exc.code!r}) at import: the module called sys.exit()"
    # One line, so a status fits a table row; pluggy's validation messages span several.
    return " ".join(str(exc).split()) or type(exc).__name__
