"""The ``accelkw`` entry point of accelkw-mlflow: registers :class:`MLflowTracker`."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import hookimpl
from accelkw_core.tracking import GeneralTracker
from accelkw_mlflow.tracker import MLflowTracker

__all__ = ["accelkw_register_trackers"]


@hookimpl
def accelkw_register_trackers(register: Callable[[type[GeneralTracker]], None]) -> None:
    """Contribute ``MLflowTracker`` under the tracker name ``mlflow``."""
    register(MLflowTracker)
