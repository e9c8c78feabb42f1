"""The ``accelkw`` entry point of accelkw-ddp: registers ``DistributedDataParallelKwargs``."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_ddp.handler import DistributedDataParallelKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``DistributedDataParallelKwargs`` under the registry name ``ddp``."""
    register(DistributedDataParallelKwargs)
