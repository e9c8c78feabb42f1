"""The ``accelkw`` entry point of accelkw-loss-guard: registers :class:`LossGuardKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_loss_guard.handler import LossGuardKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``LossGuardKwargs`` under the registry name ``loss_guard``."""
    register(LossGuardKwargs)
