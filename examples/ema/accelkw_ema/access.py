"""``ema_of(accelerator)``: the run's moving average, typed for the caller's type checker."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkw_core import Accelerator
    from accelkw_ema.average import ExponentialMovingAverage

__all__ = ["ema_of"]


def ema_of(accelerator: Accelerator) -> ExponentialMovingAverage:
    """The :class:`ExponentialMovingAverage` the ``ema`` handler keeps in ``accelerator``'s run.

    Raises :class:`~accelkw_core.AccelkwError` when the run keeps none (the handler is opt-in:
    ``Accelerator(kwargs_handlers=[EmaKwargs()])``).
    """
    # Imported here: the average module imports torch, which listing plugins must not.
    from accelkw_ema.average import ExponentialMovingAverage

    return accelerator.extra("ema", ExponentialMovingAverage)
