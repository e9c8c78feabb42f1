"""The ``accelkw`` entry point of accelkw-autocast: registers :class:`AutocastKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_autocast.handler import AutocastKwargs
from accelkw_core.plugin import KwargsHandler, hookimpl

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``AutocastKwargs`` under the registry name ``autocast``."""
    register(AutocastKwargs)
