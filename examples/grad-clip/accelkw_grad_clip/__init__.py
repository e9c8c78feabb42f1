"""accelkw-grad-clip: ``GradClipKwargs``, gradient clipping before each optimizer step."""

from accelkw_grad_clip.handler import GradClipKwargs

__all__ = ["GradClipKwargs"]
