"""accelkw-tensorboard: ``TensorBoardTracker``, TensorBoard event files from torch's SummaryWriter."""

from accelkw_tensorboard.tracker import TensorBoardTracker

__all__ = ["TensorBoardTracker"]
