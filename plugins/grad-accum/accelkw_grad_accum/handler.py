"""``GradientAccumulationPlugin``: gradients accumulated over micro-batches, one optimizer step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_core.plugin import ACCUMULATION, ConfigError, KwargsHandler, Plan, handler_field

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["AccumulationPolicy", "GradientAccumulationPlugin"]

NAME = "grad_accum"


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """Accumulate gradients over micro-batches (Accelerate's ``GradientAccumulationPlugin``).

    Inside ``with accelerator.accumulate(model):`` each batch is a micro-step; every
    ``num_steps``-th one (and the last batch of a prepared data loader, with
    ``sync_with_dataloader``) sets ``accelerator.sync_gradients`` and the prepared optimizer
    steps; on the others ``optimizer.step()`` and ``optimizer.zero_grad()`` do nothing, a
    distributed model holds back its all-reduce (``no_sync``) unless ``sync_each_batch``, and
    a prepared scheduler does not step. ``accelerator.backward`` divides the loss by
    ``num_steps``, so ``num_steps`` micro-batches give the gradient of one batch
    ``num_steps`` times as large.

    ``Accelerator(gradient_accumulation_steps=4)`` is ``GradientAccumulationPlugin(num_steps=4)``;
    ``Accelerator(gradient_accumulation_plugin=...)`` takes an instance.

    Example::

        from accelkw_grad_accum import GradientAccumulationPlugin

        plugin = GradientAccumulationPlugin(num_steps=4)
        accelerator = Accelerator(gradient_accumulation_plugin=plugin)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(loss_fn(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
    """

    name: ClassVar[str] = NAME
    accelerator_keywords: ClassVar[dict[str, str]] = {
        "gradient_accumulation_steps": "num_steps",
        "gradient_accumulation_plugin": "*",
    }
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "num_steps",
    }

    num_steps: int | None = handler_field(
        None,
        doc="How many micro-steps to accumulate gradients over before the optimizer steps; "
        "None is 1 (no accumulation).",
        ge=1,
    )
    adjust_scheduler: bool = handler_field(
        True,
        doc="Whether a prepared scheduler's step count still advances on the micro-steps that "
        "do not step the optimizer (it never steps then).",
    )
    sync_with_dataloader: bool = handler_field(
        True,
        doc="Whether the last batch of a prepared data loader syncs and steps, whatever the "
        "count, and starts the count again.",
    )
    sync_each_batch: bool = handler_field(
        False,
        doc="Whether a distributed model all-reduces its gradients on every micro-step (less "
        "memory, more communication) instead of holding them back in no_sync.",
    )

    def policy(self) -> AccumulationPolicy:
        """A new policy for the ``accumulation`` extension point with this handler's values."""
        return AccumulationPolicy(
            self.num_steps or 1,
            adjust_scheduler=self.adjust_scheduler,
            sync_with_dataloader=self.sync_with_dataloader,
            sync_each_batch=self.sync_each_batch,
        )

    def plan(self, state: AcceleratorState) -> Plan:
        """The accumulation policy, described for this run's facts."""
        plan = Plan(self.name)
        plan.contribute(ACCUMULATION, self.policy(), self._describe())
        if self.sync_each_batch and not state.distributed:
            plan.note("sync_each_batch=True has no effect on one process (nothing to all-reduce)")
        elif (self.num_steps or 1) > 1 and state.distributed:
            if self.sync_each_batch:
                plan.note("gradients are all-reduced on every micro-step (sync_each_batch)")
            else:
                plan.note(
                    "the micro-steps that do not step run in the model's no_sync (no all-reduce)"
                )
        return plan

    def _describe(self) -> str:
        steps = self.num_steps or 1
        if steps == 1:
            return (
                f"num_steps={self.num_steps}: no accumulation, every accelerator.accumulate() "
                "micro-step syncs gradients and steps the optimizer"
            )
        text = (
            f"accumulate gradients over {steps} micro-steps: every {steps}th "
            "accelerator.accumulate() micro-step syncs and steps the optimizer"
        )
        if self.sync_with_dataloader:
            text += ", and so does a prepared data loader's last batch"
        text += f"; accelerator.backward divides the loss by {steps}"
        if self.adjust_scheduler:
            text += "; prepared schedulers count the other micro-steps without stepping"
        return text


class AccumulationPolicy:
    """The ``accumulation`` contribution: Accelerate's rule for which micro-step syncs.

    ``advance`` counts micro-steps: a micro-step syncs when the count reaches a multiple of
    ``num_steps``; with ``sync_with_dataloader`` a data loader's last batch syncs too and
    starts the count again. ``num_steps`` may be changed during the run
    (``accelerator.gradient_accumulation_steps = 8``), as in Accelerate.
    """

    __slots__ = ("_num_steps", "adjust_scheduler", "sync_each_batch", "sync_with_dataloader")

    def __init__(
        self,
        num_steps: int,
        *,
        adjust_scheduler: bool = True,
        sync_with_dataloader: bool = True,
        sync_each_batch: bool = False,
    ) -> None:
        self._num_steps = 1
        self.num_steps = num_steps
        self.adjust_scheduler = adjust_scheduler
        self.sync_with_dataloader = sync_with_dataloader
        self.sync_each_batch = sync_each_batch

    @property
    def num_steps(self) -> int:
        return self._num_steps

    @num_steps.setter
    def num_steps(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                NAME,
                "num_steps",
                value,
                "an integer >= 1 (the optimizer steps once every num_steps micro-steps)",
            )
        self._num_steps = value

    def advance(self, step: int, end_of_dataloader: bool) -> tuple[int, bool]:
        """The new micro-step count, and whether this micro-step syncs and steps."""
        if self.sync_with_dataloader and end_of_dataloader:
            return 0, True
        step += 1
        return step, step % self._num_steps == 0

    def __repr__(self) -> str:
        return (
            f"AccumulationPolicy(num_steps={self._num_steps}, "
            f"adjust_scheduler={self.adjust_scheduler}, "
            f"sync_with_dataloader={self.sync_with_dataloader}, "
            f"sync_each_batch={self.sync_each_batch})"
        )
