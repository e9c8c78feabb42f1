"""``GradientClipper``: the ``around_step`` contribution that clips, then lets the step proceed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelkw_core.plugin import StepContext

__all__ = ["GradientClipper"]


class GradientClipper:
    """Clips the gradients of the optimizer being stepped, then calls ``proceed()``.

    It is both the run's ``around_step`` contribution and ``grad_clip_of(accelerator)``:

    - ``last_norm``: the total gradient norm (a 0-dim tensor, before clipping) that
      ``clip_grad_norm_`` returned on the last clipped step; ``None`` before the first one and
      with ``clip_value``. Reading it with ``.item()`` waits for the device, so log it only
      when you need it.
    - ``last_step``: the ``StepContext.index`` of that step, and ``clipped_steps`` how many
      steps were clipped. A step the loss scaler skips never reaches the clipper, so neither
      changes then.

    With a closure (``optimizer.step(closure)``), the gradients only exist once the optimizer
    calls it, so the clipper wraps the closure and clips after each call.
    """

    __slots__ = (
        "clip_value",
        "clipped_steps",
        "error_if_nonfinite",
        "last_norm",
        "last_step",
        "max_norm",
        "norm_type",
    )

    def __init__(
        self,
        *,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        clip_value: float | None = None,
        error_if_nonfinite: bool = False,
    ) -> None:
        if (max_norm is None) == (clip_value is None):
            raise ValueError("GradientClipper: pass exactly one of max_norm and clip_value")
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.clip_value = clip_value
        self.error_if_nonfinite = error_if_nonfinite
        self.last_norm: Any = None
        self.last_step: int | None = None
        self.clipped_steps = 0

    def __call__(self, step: StepContext, proceed: Callable[[], Any]) -> Any:
        closure = step.closure
        if closure is None:
            self.clip(step.optimizer, step.index)
            return proceed()

        def clipped_closure() -> Any:
            loss = closure()
            self.clip(step.optimizer, step.index)
            return loss

        step.closure = clipped_closure
        return proceed()

    def clip(self, optimizer: Any, index: int | None = None) -> Any:
        """Clip the gradients of ``optimizer``'s parameters now; return the total norm or None."""
        import torch

        params = [p for group in optimizer.param_groups for p in group["params"]]
        norm: Any = None
        if self.max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(
                params,
                self.max_norm,
                norm_type=self.norm_type,
                error_if_nonfinite=self.error_if_nonfinite,
            )
        elif self.clip_value is not None:  # exactly one of the two is set (__init__)
            torch.nn.utils.clip_grad_value_(params, self.clip_value)
        self.last_norm = norm
        self.last_step = index
        self.clipped_steps += 1
        return norm

    def __repr__(self) -> str:
        how = (
            f"max_norm={self.max_norm!r}, norm_type={self.norm_type!r}"
            if self.max_norm is not None
            else f"clip_value={self.clip_value!r}"
        )
        return f"GradientClipper({how}, clipped_steps={self.clipped_steps})"
