"""``EmaKwargs``: keep an exponential moving average of a prepared model's weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_core.plugin import (
    AFTER_STEP,
    ATTRIBUTE,
    CHECKPOINT,
    MODEL_WRAPPER,
    KwargsHandler,
    Plan,
    handler_field,
)

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["EmaKwargs"]


@dataclass
class EmaKwargs(KwargsHandler):
    """Keep an exponential moving average (EMA) of the weights of every prepared model.

    After each optimizer step that changed the parameters (not one the loss scaler skipped),
    the average of each parameter that optimizer trains moves towards its new value:
    ``average = decay * average + (1 - decay) * weight``. ``ema_of(accelerator)`` (an
    :class:`~accelkw_ema.average.ExponentialMovingAverage`) swaps the averages into the
    model for evaluation (``with ema_of(accelerator).average_parameters(): ...``), and the
    averages are saved and loaded with the run's state (the ``checkpoint`` point).

    Opt-in: installing the plugin averages nothing; a run keeps an EMA when it asks (in code,
    ``[handlers.ema]`` or ``ACCELKW_EMA__DECAY=0.999``).

    Example::

        from accelkw_ema import EmaKwargs

        accelerator = Accelerator(kwargs_handlers=[EmaKwargs(decay=0.999)])
        model, optimizer = accelerator.prepare(model, optimizer)
        ...  # train
        with ema_of(accelerator).average_parameters():
            evaluate(model)
    """

    name: ClassVar[str] = "ema"
    # The average starts from the parameters a prepared model has once wrapped: after DDP
    # broadcast rank 0's (every rank starts from the same ones), after FSDP sharded them (the
    # sharded parameters replace the module's, and the optimizer trains those).
    after: ClassVar[tuple[str, ...]] = ("ddp", "fsdp")
    opt_in: ClassVar[bool] = True

    decay: float = handler_field(
        0.999,
        gt=0,
        lt=1,
        doc="How much of the average each update keeps: average = decay * average + "
        "(1 - decay) * weight.",
    )
    update_after_step: int = handler_field(
        0,
        ge=0,
        doc="For the first this many optimizer steps the average copies the weights; "
        "averaging starts after them.",
    )
    update_every: int = handler_field(
        1, ge=1, doc="Average once every this many optimizer steps (after update_after_step)."
    )

    def plan(self, state: AcceleratorState) -> Plan:
        """Record each prepared model, average after each step, save and expose the average."""
        from accelkw_ema.average import ExponentialMovingAverage

        average = ExponentialMovingAverage(
            decay=self.decay,
            update_after_step=self.update_after_step,
            update_every=self.update_every,
        )
        plan = Plan(self.name)
        plan.contribute(
            MODEL_WRAPPER,
            average.track,
            "record each prepared model (returned unchanged); its average starts from the "
            "weights it has once wrapped",
        )
        when = "after each optimizer step that was not skipped"
        if self.update_after_step:
            when += f", copying the weights for the first {self.update_after_step} steps"
        if self.update_every > 1:
            when += f", averaging every {self.update_every} steps"
        plan.contribute(
            AFTER_STEP,
            average.after_step,
            f"{when}: average = {self.decay:g} * average + {1 - self.decay:g} * weight, for "
            "the parameters that optimizer trains",
        )
        plan.contribute(CHECKPOINT, average, "the averages are saved and loaded with the run")
        plan.contribute(
            ATTRIBUTE,
            average,
            "ema_of(accelerator) is the average (average_parameters() swaps it in for evaluation)",
            key="ema",
        )
        return plan
