"""The plugin-author tier: everything a handler plugin needs from the core, and nothing else.

A plugin that imports only from here (and from :mod:`accelkw_core.testing` in its tests) keeps
working across releases of the same minor version; see the versioning policy in the docs.
"""

from accelkw_core.discovery.hookspecs import hookimpl
from accelkw_core.errors import (
    AccelkwError,
    CheckpointError,
    ConfigError,
    PointConflictError,
    suggest,
)
from accelkw_core.handlers.base import KwargsHandler, handler_field
from accelkw_core.handlers.enums import ReferenceEnum
from accelkw_core.handlers.plan import Plan, PlanStep
from accelkw_core.runtime.checkpoint_io import CheckpointReader, CheckpointWriter
from accelkw_core.runtime.points import POINTS, ExtensionPoint
from accelkw_core.runtime.state import AcceleratorState, Contribution
from accelkw_core.runtime.stepping import StepContext

__all__ = [
    "POINTS",
    "AcceleratorState",
    "AccelkwError",
    "CheckpointError",
    "CheckpointReader",
    "CheckpointWriter",
    "ConfigError",
    "Contribution",
    "ExtensionPoint",
    "KwargsHandler",
    "Plan",
    "PlanStep",
    "PointConflictError",
    "ReferenceEnum",
    "StepContext",
    "handler_field",
    "hookimpl",
    "suggest",
]
