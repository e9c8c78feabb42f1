"""accelkw: Accelerate-style kwargs handlers as independently installable plugins."""

from accelkw_core._version import __version__
from accelkw_core.compose import compose, order_handlers, resolve_handlers
from accelkw_core.errors import (
    AccelkwError,
    ComposeError,
    ConfigError,
    HandlerApplyError,
    PluginError,
    UnknownHandlerError,
)
from accelkw_core.handler import KwargsHandler, handler_field
from accelkw_core.hookspecs import hookimpl, hookspec
from accelkw_core.registry import HandlerInfo, PluginRecord, Registry, get_registry, set_registry
from accelkw_core.state import AcceleratorState, LogEntry

__all__ = [
    "AcceleratorState",
    "AccelkwError",
    "ComposeError",
    "ConfigError",
    "HandlerApplyError",
    "HandlerInfo",
    "KwargsHandler",
    "LogEntry",
    "PluginError",
    "PluginRecord",
    "Registry",
    "UnknownHandlerError",
    "__version__",
    "compose",
    "get_registry",
    "handler_field",
    "hookimpl",
    "hookspec",
    "order_handlers",
    "resolve_handlers",
    "set_registry",
]
