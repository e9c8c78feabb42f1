"""``LossGuardKwargs``: skip the optimizer step on every rank when any rank's loss is inf or NaN."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_core.plugin import AROUND_STEP, LOSS, KwargsHandler, Plan, handler_field
from accelkw_loss_guard.guard import LossGuard

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["LossGuardKwargs"]


@dataclass
class LossGuardKwargs(KwargsHandler):
    """Skip an optimizer step on every rank when any rank's loss was inf or NaN.

    It contributes to the ``loss`` point, so it sees each loss in ``accelerator.backward``
    before anything scales it (also under fp16, where the gradient scaler owns ``backward``),
    and to ``around_step``, composed before the gradient scaler: outside its step, so every
    rank reaches it on every ``step()``. There the ranks agree with ``step.agree`` whether any of
    them saw a non-finite loss since the previous step, and if one did, all of them skip the
    step: the weights stay equal across ranks, and no rank waits in a collective another skipped.
    :func:`~accelkw_loss_guard.loss_guard` gives the run's :class:`~accelkw_loss_guard.LossGuard`
    (its counters).

    Opt-in: installing the plugin changes nothing; a run asks for it (in code,
    ``[handlers.loss_guard]`` or ``ACCELKW_LOSS_GUARD__MAX_CONSECUTIVE_SKIPS=10``).

    Example::

        from accelkw_loss_guard import LossGuardKwargs

        accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[LossGuardKwargs()])
    """

    name: ClassVar[str] = "loss_guard"
    before: ClassVar[tuple[str, ...]] = ("grad_scaler", "grad_clip")
    opt_in: ClassVar[bool] = True

    max_consecutive_skips: int | None = handler_field(
        None,
        ge=1,
        doc="Raise NonFiniteLossError (on every rank) after this many skipped steps in a row; "
        "None: skip for ever.",
    )

    def plan(self, state: AcceleratorState) -> Plan:
        """Watch the losses and guard each optimizer step."""
        guard = LossGuard(self.max_consecutive_skips)
        plan = Plan(self.name)
        plan.contribute(
            LOSS, guard, "check every loss for inf/NaN before backward (and before loss scaling)"
        )
        ranks = "every rank" if state.distributed else "this process"
        limit = (
            f"; fail after {self.max_consecutive_skips} in a row"
            if self.max_consecutive_skips is not None
            else ""
        )
        plan.contribute(
            AROUND_STEP,
            guard.around,
            f"skip the optimizer step on {ranks} when any rank saw a non-finite loss since the "
            f"last step (outside the loss scaler's step){limit}",
        )
        return plan
