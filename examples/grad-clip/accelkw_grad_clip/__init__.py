"""accelkw-grad-clip: ``GradClipKwargs``, gradient clipping before each optimizer step."""

from accelkw_grad_clip.access import grad_clip_of
from accelkw_grad_clip.handler import GradClipKwargs

__all__ = ["GradClipKwargs", "grad_clip_of"]
