"""accelkw: Accelerate-style kwargs handlers as independently installable plugins.

This is the users' tier: the ``Accelerator``, the handler base class, the state, the registry
(to register plugins in code), the errors, and what Accelerate's examples import from
``accelerate`` itself (``DistributedType``, ``DataLoaderConfiguration``,
``find_executable_batch_size``, ``skip_first_batches``). Plugin authors import from
:mod:`accelkw_core.plugin`, tests from :mod:`accelkw_core.testing`.

Names are re-exported lazily (PEP 562): ``accelkw plugins list`` must start in a few
milliseconds, so importing the package does not import every submodule up front.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from accelkw_core._version import __version__

if TYPE_CHECKING:
    from accelkw_core.accelerator import Accelerator
    from accelkw_core.contract.handler import KwargsHandler
    from accelkw_core.discovery.default_registry import get_registry, set_registry
    from accelkw_core.discovery.registry import Registry
    from accelkw_core.errors import (
        AccelkwError,
        CheckpointError,
        ComposeError,
        ConfigError,
        ConfigFileError,
        HandlerApplyError,
        PluginError,
        PointConflictError,
        UnknownHandlerError,
    )
    from accelkw_core.runtime.checkpoints.project import ProjectConfiguration
    from accelkw_core.runtime.data.data_loader import skip_first_batches
    from accelkw_core.runtime.data.dataloader_config import DataLoaderConfiguration
    from accelkw_core.runtime.memory import find_executable_batch_size
    from accelkw_core.runtime.processes.coordination import DistributedType
    from accelkw_core.runtime.run_state import RunState

if TYPE_CHECKING:  # the names that moved in 0.2, typed as what they are (they warn at run time)
    AcceleratorState = RunState  # renamed in 0.2 (it warns at run time)
    from accelkw_core.config.selection import order_handlers as order_handlers
    from accelkw_core.config.selection import resolve_handlers as resolve_handlers
    from accelkw_core.contract.state_view import LogEntry as LogEntry
    from accelkw_core.discovery.hookspecs import hookspec as hookspec
    from accelkw_core.discovery.registry import HandlerInfo as HandlerInfo
    from accelkw_core.discovery.registry import PluginRecord as PluginRecord
    from accelkw_core.plugin import handler_field as handler_field
    from accelkw_core.plugin import hookimpl as hookimpl
    from accelkw_core.runtime.composing.composition import compose as compose

_EXPORTS = {
    "Accelerator": "accelkw_core.accelerator",
    "RunState": "accelkw_core.runtime.run_state",
    # What Accelerate's own examples import from ``accelerate`` itself.
    "DataLoaderConfiguration": "accelkw_core.runtime.data.dataloader_config",
    "DistributedType": "accelkw_core.runtime.processes.coordination",
    "find_executable_batch_size": "accelkw_core.runtime.memory",
    "skip_first_batches": "accelkw_core.runtime.data.data_loader",
    "KwargsHandler": "accelkw_core.contract.handler",
    "ProjectConfiguration": "accelkw_core.runtime.checkpoints.project",
    "Registry": "accelkw_core.discovery.registry",
    "get_registry": "accelkw_core.discovery.default_registry",
    "set_registry": "accelkw_core.discovery.default_registry",
    "AccelkwError": "accelkw_core.errors",
    "CheckpointError": "accelkw_core.errors",
    "ComposeError": "accelkw_core.errors",
    "ConfigError": "accelkw_core.errors",
    "ConfigFileError": "accelkw_core.errors",
    "HandlerApplyError": "accelkw_core.errors",
    "PluginError": "accelkw_core.errors",
    "PointConflictError": "accelkw_core.errors",
    "UnknownHandlerError": "accelkw_core.errors",
}

# Names 0.1 exported here that belong to another tier: they keep working through 0.2 with a
# DeprecationWarning that names where they live now (docs/versioning.md), and go in 0.3.
_MOVED = {
    "hookimpl": "accelkw_core.plugin",
    "handler_field": "accelkw_core.plugin",
    "hookspec": "accelkw_core.discovery.hookspecs",
    "compose": "accelkw_core.runtime.composing.composition",
    "order_handlers": "accelkw_core.config.selection",
    "resolve_handlers": "accelkw_core.config.selection",
    "HandlerInfo": "accelkw_core.discovery.registry",
    "PluginRecord": "accelkw_core.discovery.registry",
    "LogEntry": "accelkw_core.contract.state_view",
}

# Names renamed in 0.2 (0.1 exported them here under their old name): they keep working through
# 0.2 with a DeprecationWarning that names the new one, and go in 0.3.
_RENAMED = {
    "AcceleratorState": (
        "RunState",
        "accelkw_core.runtime.run_state",
        "the run's state is accelkw_core.RunState (a handler types against the protocol "
        "accelkw_core.plugin.AcceleratorState; Accelerate's accelerate.state.AcceleratorState is "
        "accelkw_core.state.AcceleratorState)",
    ),
}

__all__ = [
    "Accelerator",
    "AccelkwError",
    "CheckpointError",
    "ComposeError",
    "ConfigError",
    "ConfigFileError",
    "DataLoaderConfiguration",
    "DistributedType",
    "HandlerApplyError",
    "KwargsHandler",
    "PluginError",
    "PointConflictError",
    "ProjectConfiguration",
    "Registry",
    "RunState",
    "UnknownHandlerError",
    "__version__",
    "find_executable_batch_size",
    "get_registry",
    "set_registry",
    "skip_first_batches",
]


# Hidden from type checkers, which read the imports above instead: a misspelt name is then an
# error there, not an ``Any``.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        return _lazy(name)


def _lazy(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        renamed = _RENAMED.get(name)
        if renamed is not None:
            new, where, advice = renamed
            warnings.warn(
                f"accelkw_core.{name} is deprecated since 0.2 and goes in 0.3: {advice}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(where), new)
        moved = _MOVED.get(name)
        if moved is None:
            raise AttributeError(f"module 'accelkw_core' has no attribute {name!r}")
        warnings.warn(
            f"accelkw_core.{name} is deprecated since 0.2 and goes in 0.3; "
            f"import it from {moved} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
