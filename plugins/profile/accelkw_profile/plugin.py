"""The ``accelkw`` entry point of accelkw-profile: registers :class:`ProfileKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_profile.handler import ProfileKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``ProfileKwargs`` under the registry name ``profile``."""
    register(ProfileKwargs)
