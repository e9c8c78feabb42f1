"""``GradScalerKwargs``: how the ``torch.amp.GradScaler`` of an fp16 run is created."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core.plugin import (
    AFTER_STEP,
    AROUND_BACKWARD,
    AROUND_STEP,
    ATTRIBUTE,
    CHECKPOINT,
    UNSCALE_GRADIENTS,
    ConfigError,
    KwargsHandler,
    Plan,
    StepContext,
    handler_field,
)

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["GradScalerKwargs"]


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Customise the gradient scaler of fp16 mixed precision (Accelerate's ``GradScalerKwargs``).

    With mixed precision ``"fp16"`` it creates ``torch.amp.GradScaler(state.device_type,
    init_scale=..., growth_factor=..., backoff_factor=..., growth_interval=..., enabled=...)``
    and contributes it to the run's extension points: ``around_backward`` (the backward runs
    on ``scaler.scale(loss)``, so other plugins' backward wrappers compose with it),
    ``around_step`` (``scaler.step(optimizer)``, which unscales and skips a step
    with inf/NaN gradients, then ``scaler.update()``), ``unscale_gradients``
    (``scaler.unscale_(optimizer)`` before gradient clipping), ``checkpoint`` (its state is saved with
    the run) and ``attribute`` (``accelerator.scaler``). With ``"bf16"`` or ``"no"`` there is
    nothing to scale: no scaler is created and the state's log says why.

    ``enabled=False`` still sets a scaler, a disabled one, as Accelerate does: its ``scale``
    returns the loss unchanged and its ``step`` calls ``optimizer.step()`` directly, so the
    training loop and checkpoints that save ``scaler.state_dict()`` keep working unchanged.

    Example::

        from accelkw_grad_scaler import GradScalerKwargs

        accelerator = Accelerator(
            mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(backoff_factor=0.25)]
        )
    """

    name: ClassVar[str] = "grad_scaler"
    after: ClassVar[tuple[str, ...]] = ("autocast",)

    init_scale: float = handler_field(
        65536.0, doc="The scale factor losses are multiplied by at the start.", gt=0, finite=True
    )
    growth_factor: float = handler_field(
        2.0,
        doc="What the scale is multiplied by after growth_interval steps without inf/NaN "
        "gradients.",
        gt=1,
        finite=True,
    )
    backoff_factor: float = handler_field(
        0.5,
        doc="What the scale is multiplied by when a step finds inf/NaN gradients "
        "(that optimizer step is skipped).",
        gt=0,
        lt=1,
    )
    growth_interval: int = handler_field(
        2000, doc="How many consecutive clean steps it takes to grow the scale.", ge=1
    )
    enabled: bool = handler_field(
        True,
        doc="Whether gradients are scaled; False sets a disabled scaler whose calls pass through.",
    )

    def check_values(self) -> None:
        # The declared ranges let infinity through (inf > 0); torch would then scale to inf.
        for field in ("init_scale", "growth_factor"):
            value = getattr(self, field)
            if not math.isfinite(value):
                raise ConfigError(self.name, field, value, "a finite number")

    def scaler_kwargs(self) -> dict[str, Any]:
        """Every keyword ``torch.amp.GradScaler`` receives besides the device (all fields)."""
        return self.field_values()

    def build(self, device_type: str) -> Any:
        """A new ``torch.amp.GradScaler`` for ``device_type`` with every field of this handler."""
        import torch

        return torch.amp.GradScaler(device_type, **self.scaler_kwargs())

    def plan(self, state: AcceleratorState) -> Plan:
        """The scaler's contributions for an fp16 run, or why there is no scaler."""
        plan = Plan(self.name)
        text = self._plan(state)
        if state.mixed_precision != "fp16":
            return plan.note(text)
        scaler = self.build(state.device_type)
        unscale = _Unscale(scaler)
        plan.contribute(AROUND_BACKWARD, _ScaledBackward(scaler), text, provides=("loss_scaling",))
        plan.contribute(
            AROUND_STEP,
            _ScaledStep(scaler, unscale),
            "optimizer steps go through scaler.step() (unscale; skip on inf/NaN) and "
            "scaler.update()",
        )
        plan.contribute(
            UNSCALE_GRADIENTS,
            unscale,
            "gradient clipping unscales first (scaler.unscale_(optimizer))",
        )
        plan.contribute(
            AFTER_STEP,
            unscale.close,
            "a step skipped outside the scaler after unscaling still ends with scaler.update()",
        )
        plan.contribute(CHECKPOINT, scaler, "the scaler's state is saved with the run")
        plan.contribute(ATTRIBUTE, scaler, "accelerator.scaler is this scaler", key="scaler")
        return plan

    def _plan(self, state: AcceleratorState) -> str:
        if state.mixed_precision != "fp16":
            text = (
                f"mixed precision {state.mixed_precision!r}: no GradScaler created "
                "(loss scaling is only needed for fp16)"
            )
            explicit = self.explicit_kwargs()
            if explicit:
                settings = ", ".join(f"{k}={v!r}" for k, v in explicit.items())
                text += f"; {settings} has no effect"
            return text
        if not self.enabled:
            return (
                f"torch.amp.GradScaler({state.device_type!r}, enabled=False): scaling is "
                "disabled, losses and optimizer steps pass through unscaled"
            )
        return (
            f"torch.amp.GradScaler({state.device_type!r}, init_scale={self.init_scale:g}, "
            f"growth_factor={self.growth_factor:g}, backoff_factor={self.backoff_factor:g}, "
            f"growth_interval={self.growth_interval})"
        )


class _ScaledBackward:
    """``around_backward`` contribution: the rest of the chain, and the backward, run on
    ``scaler.scale(loss)`` (a wrapper composed before the scaler sees the true loss, one
    composed after it the scaled one)."""

    __slots__ = ("scaler",)

    def __init__(self, scaler: Any) -> None:
        self.scaler = scaler

    def __call__(self, loss: Any, proceed: Callable[[Any], None]) -> None:
        proceed(self.scaler.scale(loss))


_NO_STEP = object()


class _Unscale:
    """``unscale_gradients`` contribution: ``scaler.unscale_(optimizer)``, remembered until an
    update, and the ``after_step`` one that closes the scaler's iteration when nobody did.

    An ``around_step`` composed outside the scaler's (a guard that skips the step on every rank)
    may skip it after clipping unscaled the gradients: ``scaler.step`` and ``scaler.update``
    never run, and the next ``unscale_`` would fail ("already been called ... since the last
    update()"). :meth:`close`, after every step, calls ``scaler.update()`` then, which also
    backs the scale off when the unscaled gradients held inf/NaN.
    """

    __slots__ = ("pending", "scaler")

    def __init__(self, scaler: Any) -> None:
        self.scaler = scaler
        self.pending = False

    def __call__(self, optimizer: Any) -> None:
        self.scaler.unscale_(optimizer)
        self.pending = True

    def close(self, step: StepContext) -> None:
        if self.pending:
            self.pending = False
            self.scaler.update()


class _ScaledStep:
    """``around_step`` contribution: the optimizer step through ``scaler.step``, then update.

    ``scaler.step(optimizer)`` unscales the gradients (unless ``unscale_`` ran already, as for
    gradient clipping), then calls ``optimizer.step()`` only when they are finite. That call is
    routed into ``proceed()`` for the time of the step, so the inner contributions (a clipping
    handler) and the real step run exactly when the scaler steps, and not at all when it skips.
    """

    __slots__ = ("scaler", "unscale")

    def __init__(self, scaler: Any, unscale: _Unscale) -> None:
        self.scaler = scaler
        self.unscale = unscale

    def __call__(self, step: StepContext, proceed: Callable[[], Any]) -> Any:
        optimizer = step.optimizer
        # An instance attribute set by someone else (an LR scheduler's step counter) survives.
        saved = optimizer.__dict__.get("step", _NO_STEP)

        def restore() -> None:
            if saved is _NO_STEP:
                optimizer.__dict__.pop("step", None)
            else:
                optimizer.__dict__["step"] = saved

        def routed(*args: Any, **kwargs: Any) -> Any:
            # The closure is already the step's; keywords (grad_scaler= for fused optimizers)
            # go on to the real step.
            restore()
            step.kwargs.update(kwargs)
            return proceed()

        optimizer.__dict__["step"] = routed
        try:
            if step.closure is not None:
                result = self.scaler.step(optimizer, step.closure)
            else:
                result = self.scaler.step(optimizer)
        finally:
            restore()
        self.scaler.update()
        self.unscale.pending = False
        return result
