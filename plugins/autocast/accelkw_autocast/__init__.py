"""accelkw-autocast: ``AutocastKwargs``, how ``torch.autocast`` runs under mixed precision."""

from accelkw_autocast.handler import AutocastKwargs

__all__ = ["AutocastKwargs"]
