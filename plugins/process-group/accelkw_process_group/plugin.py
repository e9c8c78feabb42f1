"""The ``accelkw`` entry point of accelkw-process-group: registers ``InitProcessGroupKwargs``."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_process_group.handler import InitProcessGroupKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``InitProcessGroupKwargs`` under the registry name ``process_group``."""
    register(InitProcessGroupKwargs)
