"""The ``accelkw`` entry point of accelkw-nan-guard: registers :class:`NanGuardKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_nan_guard.handler import NanGuardKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``NanGuardKwargs`` under the registry name ``nan_guard``."""
    register(NanGuardKwargs)
