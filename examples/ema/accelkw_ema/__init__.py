"""accelkw-ema: ``EmaKwargs``, an exponential moving average of the weights."""

from accelkw_ema.access import ema_of
from accelkw_ema.handler import EmaKwargs

__all__ = ["EmaKwargs", "ema_of"]
