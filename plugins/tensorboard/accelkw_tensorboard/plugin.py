"""The ``accelkw`` entry point of accelkw-tensorboard: registers :class:`TensorBoardTracker`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import hookimpl
from accelkw_core.tracking import GeneralTracker
from accelkw_tensorboard.tracker import TensorBoardTracker

__all__ = ["accelkw_register_trackers"]


@hookimpl
def accelkw_register_trackers(register: Callable[[type[GeneralTracker]], None]) -> None:
    """Contribute ``TensorBoardTracker`` under the tracker name ``tensorboard``."""
    register(TensorBoardTracker)
