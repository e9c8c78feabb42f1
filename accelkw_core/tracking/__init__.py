"""Experiment trackers: Accelerate's ``GeneralTracker`` API, with trackers installed as plugins.

A tracker plugin contributes ``GeneralTracker`` subclasses through the
``accelkw_register_trackers`` hook; ``Accelerator(log_with=...)`` picks installed trackers by
name (or ``"all"``) and takes ``GeneralTracker`` instances as they are.
"""

from accelkw_core.contract.tracker import GeneralTracker, is_main_process, on_main_process
from accelkw_core.tracking.selection import (
    ALL,
    LoggerType,
    LogWith,
    TrackerChoice,
    filter_trackers,
)

__all__ = [
    "ALL",
    "GeneralTracker",
    "LogWith",
    "LoggerType",
    "TrackerChoice",
    "filter_trackers",
    "is_main_process",
    "on_main_process",
]
