"""accelkw: Accelerate-style kwargs handlers as independently installable plugins.

Names are re-exported lazily (PEP 562): ``accelkw plugins list`` must start in a few
milliseconds, so importing the package does not import every submodule up front.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accelkw_core._version import __version__

if TYPE_CHECKING:
    from accelkw_core.discovery.hookspecs import hookimpl, hookspec
    from accelkw_core.discovery.registry import (
        HandlerInfo,
        PluginRecord,
        Registry,
        get_registry,
        set_registry,
    )
    from accelkw_core.errors import (
        AccelkwError,
        ComposeError,
        ConfigError,
        ConfigFileError,
        HandlerApplyError,
        PluginError,
        UnknownHandlerError,
    )
    from accelkw_core.handlers.base import KwargsHandler, handler_field
    from accelkw_core.runtime.accelerator import Accelerator
    from accelkw_core.runtime.composition import compose, order_handlers, resolve_handlers
    from accelkw_core.runtime.state import AcceleratorState, LogEntry

_EXPORTS = {
    "Accelerator": "accelkw_core.runtime.accelerator",
    "compose": "accelkw_core.runtime.composition",
    "order_handlers": "accelkw_core.runtime.composition",
    "resolve_handlers": "accelkw_core.runtime.composition",
    "AccelkwError": "accelkw_core.errors",
    "ComposeError": "accelkw_core.errors",
    "ConfigError": "accelkw_core.errors",
    "ConfigFileError": "accelkw_core.errors",
    "HandlerApplyError": "accelkw_core.errors",
    "PluginError": "accelkw_core.errors",
    "UnknownHandlerError": "accelkw_core.errors",
    "KwargsHandler": "accelkw_core.handlers.base",
    "handler_field": "accelkw_core.handlers.base",
    "hookimpl": "accelkw_core.discovery.hookspecs",
    "hookspec": "accelkw_core.discovery.hookspecs",
    "HandlerInfo": "accelkw_core.discovery.registry",
    "PluginRecord": "accelkw_core.discovery.registry",
    "Registry": "accelkw_core.discovery.registry",
    "get_registry": "accelkw_core.discovery.registry",
    "set_registry": "accelkw_core.discovery.registry",
    "AcceleratorState": "accelkw_core.runtime.state",
    "LogEntry": "accelkw_core.runtime.state",
}

__all__ = [
    "Accelerator",
    "AcceleratorState",
    "AccelkwError",
    "ComposeError",
    "ConfigError",
    "ConfigFileError",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accelkw_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
