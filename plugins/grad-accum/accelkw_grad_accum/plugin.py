"""The ``accelkw`` entry point of accelkw-grad-accum: registers :class:`GradientAccumulationPlugin`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_grad_accum.handler import GradientAccumulationPlugin

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``GradientAccumulationPlugin`` under the registry name ``grad_accum``."""
    register(GradientAccumulationPlugin)
