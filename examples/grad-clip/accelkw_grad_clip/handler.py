"""``GradClipKwargs``: clip the gradients before each optimizer step, inside the loss scaler's step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_core.plugin import (
    AROUND_STEP,
    ATTRIBUTE,
    ConfigError,
    KwargsHandler,
    Plan,
    handler_field,
)
from accelkw_grad_clip.clipper import GradientClipper

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["GradClipKwargs"]


@dataclass
class GradClipKwargs(KwargsHandler):
    """Clip the gradients of every optimizer step: their total norm, or each value.

    With ``max_norm`` it calls ``torch.nn.utils.clip_grad_norm_`` on the parameters of the
    optimizer being stepped, right before the step; with ``clip_value``,
    ``torch.nn.utils.clip_grad_value_``. It contributes an ``around_step`` composed after the
    gradient scaler's (``after = ("grad_scaler",)``), so under fp16 it runs inside
    ``scaler.step``: after the gradients are unscaled, and not at all on a step the scaler
    skips for inf/NaN gradients. ``grad_clip_of(accelerator)`` (an ``attribute`` contribution, typed) is the
    :class:`~accelkw_grad_clip.clipper.GradientClipper`, whose ``last_norm`` is the total norm
    of the last clipped step, before clipping.

    Opt-in: installing the plugin clips nothing; a run clips when it asks (in code,
    ``[handlers.grad_clip]`` or ``ACCELKW_GRAD_CLIP__MAX_NORM=1.0``).

    Example::

        from accelkw_grad_clip import GradClipKwargs

        accelerator = Accelerator(
            mixed_precision="fp16", kwargs_handlers=[GradClipKwargs(max_norm=1.0)]
        )
    """

    name: ClassVar[str] = "grad_clip"
    after: ClassVar[tuple[str, ...]] = ("grad_scaler",)
    opt_in: ClassVar[bool] = True

    max_norm: float | None = handler_field(
        None,
        gt=0,
        finite=True,
        doc="Clip the total gradient norm to this (clip_grad_norm_); None: no norm clipping.",
    )
    norm_type: float = handler_field(
        2.0, gt=0, doc="The p of the p-norm used with max_norm; inf for the largest value."
    )
    clip_value: float | None = handler_field(
        None,
        gt=0,
        finite=True,
        doc="Clip every gradient value to [-clip_value, clip_value] (clip_grad_value_); "
        "None: no value clipping. Only one of max_norm and clip_value.",
    )
    error_if_nonfinite: bool = handler_field(
        False,
        doc="With max_norm, raise when the total norm is inf or NaN instead of clipping "
        "(a step the loss scaler skips never gets here).",
    )

    def check_values(self) -> None:
        if self.max_norm is not None and self.clip_value is not None:
            raise ConfigError(
                self.name,
                "clip_value",
                self.clip_value,
                f"None when max_norm is set (max_norm={self.max_norm!r}): clip the total "
                "norm or each value, not both",
            )

    def plan(self, state: AcceleratorState) -> Plan:
        """The clipping step around each optimizer step, or why there is none."""
        plan = Plan(self.name)
        if self.max_norm is None and self.clip_value is None:
            return plan.note("neither max_norm nor clip_value is set: gradients are not clipped")
        if self.max_norm is not None:
            what = f"clip_grad_norm_(max_norm={self.max_norm:g}, norm_type={self.norm_type:g})"
        else:
            what = f"clip_grad_value_(clip_value={self.clip_value:g})"
            unused = [f for f in ("norm_type", "error_if_nonfinite") if f in self.explicit_fields()]
            if unused:
                plan.note(f"{' and '.join(unused)}: used only with max_norm, not with clip_value")
        clipper = GradientClipper(
            max_norm=self.max_norm,
            norm_type=self.norm_type,
            clip_value=self.clip_value,
            error_if_nonfinite=self.error_if_nonfinite,
        )
        plan.contribute(
            AROUND_STEP,
            clipper,
            f"{what} on the optimizer's parameters before each step, inside the loss "
            "scaler's step when there is one (unscaled gradients; a skipped step is not clipped)",
        )
        plan.contribute(
            ATTRIBUTE,
            clipper,
            "grad_clip_of(accelerator) is the clipper (last_norm: the total norm of the last "
            "clipped step)",
            key="grad_clip",
        )
        return plan
