"""The ``accelkw`` entry point of accelkw-grad-scaler: registers :class:`GradScalerKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_grad_scaler.handler import GradScalerKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``GradScalerKwargs`` under the registry name ``grad_scaler``."""
    register(GradScalerKwargs)
