"""The ``accelkw`` entry point of accelkw-ema: registers :class:`EmaKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_ema.handler import EmaKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``EmaKwargs`` under the registry name ``ema``."""
    register(EmaKwargs)
