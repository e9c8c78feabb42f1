"""The ``accelkw`` entry point of accelkw-seed: registers :class:`SeedKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_seed.handler import SeedKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``SeedKwargs`` under the registry name ``seed``."""
    register(SeedKwargs)
