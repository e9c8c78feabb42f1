"""The ``accelkw`` entry point of accelkw-compile: registers ``TorchDynamoPlugin``."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_compile.handler import TorchDynamoPlugin
from accelkw_core.plugin import KwargsHandler, hookimpl

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``TorchDynamoPlugin`` under the registry name ``compile``."""
    register(TorchDynamoPlugin)
