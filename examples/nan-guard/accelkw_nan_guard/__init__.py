"""accelkw-nan-guard: ``NanGuardKwargs``, skip a step on every rank when any rank's loss is inf/NaN."""

from accelkw_nan_guard.guard import NanGuard, NonFiniteLossError, nan_guard
from accelkw_nan_guard.handler import NanGuardKwargs

__all__ = ["NanGuard", "NanGuardKwargs", "NonFiniteLossError", "nan_guard"]
