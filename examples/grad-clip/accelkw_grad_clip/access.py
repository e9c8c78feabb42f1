"""``grad_clip_of(accelerator)``: the run's clipper, typed for the caller's type checker."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkw_core import Accelerator
    from accelkw_grad_clip.clipper import GradientClipper

__all__ = ["grad_clip_of"]


def grad_clip_of(accelerator: Accelerator) -> GradientClipper:
    """The :class:`GradientClipper` the ``grad_clip`` handler keeps in ``accelerator``'s run.

    Raises :class:`~accelkw_core.AccelkwError` when the run clips nothing (the handler is
    opt-in: ``Accelerator(kwargs_handlers=[GradClipKwargs(max_norm=1.0)])``).
    """
    # Imported here, as the handler does, so listing plugins imports no torch.
    from accelkw_grad_clip.clipper import GradientClipper

    return accelerator.extra("grad_clip", GradientClipper)
