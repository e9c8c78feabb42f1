"""The ``accelkw`` entry point of accelkw-grad-clip: registers :class:`GradClipKwargs`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_grad_clip.handler import GradClipKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``GradClipKwargs`` under the registry name ``grad_clip``."""
    register(GradClipKwargs)
