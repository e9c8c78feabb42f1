"""accelkw-async-checkpoint: ``AsyncCheckpointKwargs``, checkpoints written in the background."""

from accelkw_async_checkpoint.background import BackgroundSaves
from accelkw_async_checkpoint.handler import AsyncCheckpointKwargs

__all__ = ["AsyncCheckpointKwargs", "BackgroundSaves"]
