"""accelkw-grad-scaler: ``GradScalerKwargs``, how ``torch.amp.GradScaler`` is created."""

from accelkw_grad_scaler.handler import GradScalerKwargs

__all__ = ["GradScalerKwargs"]
