"""The ``accelkw`` entry point of accelkw-async-checkpoint: registers :class:`AsyncCheckpointKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_async_checkpoint.handler import AsyncCheckpointKwargs
from accelkw_core.plugin import KwargsHandler, hookimpl

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``AsyncCheckpointKwargs`` under the registry name ``async_checkpoint``."""
    register(AsyncCheckpointKwargs)
