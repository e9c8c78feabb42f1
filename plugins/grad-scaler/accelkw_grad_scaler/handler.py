"""``GradScalerKwargs``: how the ``torch.amp.GradScaler`` of an fp16 run is created."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core import ConfigError, KwargsHandler, handler_field

if TYPE_CHECKING:
    from accelkw_core import AcceleratorState

__all__ = ["GradScalerKwargs"]


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Customise the gradient scaler of fp16 mixed precision (Accelerate's ``GradScalerKwargs``).

    With mixed precision ``"fp16"``, :meth:`apply` creates
    ``torch.amp.GradScaler(state.device_type, init_scale=..., growth_factor=...,
    backoff_factor=..., growth_interval=..., enabled=...)`` and puts it in ``state.grad_scaler``;
    the runtime then does ``scaler.scale(loss).backward()``, ``scaler.step(optimizer)`` and
    ``scaler.update()``. With ``"bf16"`` or ``"no"`` there is nothing to scale: no scaler is
    created and the state's log says why.

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

    def apply(self, state: AcceleratorState) -> None:
        """Set ``state.grad_scaler`` for fp16 runs; record what was done or why nothing was."""
        if state.mixed_precision != "fp16":
            state.record(self.name, self._plan(state), applied=False)
            return
        state.grad_scaler = self.build(state.device_type)
        state.record(self.name, self._plan(state))

    def describe(self, state: AcceleratorState) -> str:
        """What :meth:`apply` would do on ``state``; creates nothing."""
        return self._plan(state)

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
