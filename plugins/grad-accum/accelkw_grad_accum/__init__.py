"""accelkw-grad-accum: ``GradientAccumulationPlugin``, gradient accumulation over micro-batches."""

from accelkw_grad_accum.handler import GradientAccumulationPlugin

__all__ = ["GradientAccumulationPlugin"]
