"""accelkw-loss-guard: ``LossGuardKwargs``, skip a step on every rank when any rank's loss is inf/NaN."""

from accelkw_loss_guard.guard import LossGuard, NonFiniteLossError, loss_guard
from accelkw_loss_guard.handler import LossGuardKwargs

__all__ = ["LossGuard", "LossGuardKwargs", "NonFiniteLossError", "loss_guard"]
