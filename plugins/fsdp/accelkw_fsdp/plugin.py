"""The ``accelkw`` entry point of accelkw-fsdp: registers ``FullyShardedDataParallelPlugin``."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_fsdp.handler import FullyShardedDataParallelPlugin

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``FullyShardedDataParallelPlugin`` under the registry name ``fsdp``."""
    register(FullyShardedDataParallelPlugin)
