"""``LossGuard``: sees every loss before backward and skips a step on every rank when any saw inf/NaN."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accelkw_core.plugin import LOSS, AccelkwError

if TYPE_CHECKING:
    import torch

    from accelkw_core import Accelerator
    from accelkw_core.plugin import StepContext

__all__ = ["LossGuard", "NonFiniteLossError", "loss_guard"]


class NonFiniteLossError(AccelkwError):
    """Raised on every rank when ``max_consecutive_skips`` steps in a row had a non-finite loss."""

    def __init__(self, skipped: int, limit: int) -> None:
        self.skipped, self.limit = skipped, limit
        super().__init__(
            f"loss_guard: {skipped} optimizer steps in a row had an inf/NaN loss on some rank "
            f"(max_consecutive_skips={limit}); look at the data and the learning rate, or "
            "raise the limit"
        )


class LossGuard:
    """The guard of one run: a ``loss`` contribution (it is called with each loss) and an
    ``around_step`` one (:meth:`around`).

    Called with a loss (on every rank, by ``accelerator.backward``, before any loss scaling),
    it notes whether the loss is finite and returns it unchanged. Around the next optimizer
    step, every rank agrees (``step.agree``) whether any rank saw a non-finite loss since the
    previous step; if one did, every rank skips the step. The counters are this rank's.
    """

    def __init__(self, max_consecutive_skips: int | None = None) -> None:
        self.max_consecutive_skips = max_consecutive_skips
        #: Losses seen on this rank, and how many of them were inf or NaN.
        self.losses_seen = 0
        self.nonfinite_losses = 0
        #: The last loss seen (detached), for a look at what the guard saw.
        self.last_loss: torch.Tensor | None = None
        #: Steps skipped (on every rank alike), and how many in a row up to now.
        self.skipped_steps = 0
        self.consecutive_skips = 0
        self._pending = False

    def __call__(self, loss: torch.Tensor) -> torch.Tensor:
        import torch

        detached = loss.detach()
        self.losses_seen += 1
        self.last_loss = detached
        if not bool(torch.isfinite(detached).all()):
            self.nonfinite_losses += 1
            self._pending = True
        return loss

    def around(self, step: StepContext, proceed: Callable[[], Any]) -> Any:
        """Skip the step on every rank when any rank saw a non-finite loss since the last one.

        Composed before the loss scaler (outside its step), so every rank runs this on every
        ``step()`` and the all-reduce in ``step.agree`` always meets every rank.
        """
        skip = step.agree(self._pending)
        self._pending = False
        if not skip:
            self.consecutive_skips = 0
            return proceed()
        self.skipped_steps += 1
        self.consecutive_skips += 1
        limit = self.max_consecutive_skips
        if limit is not None and self.consecutive_skips >= limit:
            raise NonFiniteLossError(self.consecutive_skips, limit)
        return None

    def __repr__(self) -> str:
        return (
            f"LossGuard(losses_seen={self.losses_seen}, nonfinite_losses={self.nonfinite_losses}, "
            f"skipped_steps={self.skipped_steps})"
        )


def loss_guard(accelerator: Accelerator) -> LossGuard | None:
    """The guard of ``accelerator``'s run, or ``None`` when the run has none (a typed accessor)."""
    for value in accelerator.state.values(LOSS):
        if isinstance(value, LossGuard):
            return value
    return None
