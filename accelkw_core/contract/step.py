"""What an around-step or after-step contribution sees of one optimizer step.

The runtime builds a :class:`StepContext` for every step of a prepared optimizer and runs the
``around_step`` and ``after_step`` contributions on it
(``accelkw_core.runtime.stepping.training_step``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from accelkw_core.contract.state_view import AcceleratorState

__all__ = ["AfterStep", "AroundStep", "StepContext"]


class StepContext:
    """What an around-step or after-step contribution sees of one optimizer step.

    ``optimizer`` is the optimizer being stepped (after every optimizer wrapper, before the
    runtime's own); ``closure`` the closure passed to ``step``. Two counters, both of what came
    before this step through this prepared optimizer, from 0:

    - ``index``: the ``step()`` calls that ran the step chain, skipped steps included (a
      ``step()`` during gradient accumulation that does not sync does nothing and is not
      counted). It numbers the calls: ``0, 1, 2, ...`` whatever happened in them.
    - ``taken``: the steps that changed the parameters (``index`` less the skipped ones). Under
      fp16 a step the loss scaler skips moves ``index`` on but not ``taken``.

    ``skipped`` is ``True`` once the step did not change
    the parameters: an around-step contribution did not call ``proceed()``. ``kwargs`` go to
    the innermost ``optimizer.step`` (a contribution may add some, as a loss scaler does
    for fused optimizers). ``run`` is the run's state: always set by the runtime (every step
    of a prepared optimizer), ``None`` only in a context built by hand without one (a unit
    test), where :meth:`agree` and :meth:`agree_value` act as for one process.

    Every rank runs the outermost ``around_step`` contribution and every ``after_step`` one on
    each ``step()``; an inner contribution runs only where the outer ones proceed, and a loss
    scaler decides that on each rank alone. So a contribution that must act on every rank
    alike decides with :meth:`agree`, never with a collective of its own behind a rank-local
    ``if``.
    """

    __slots__ = ("closure", "index", "kwargs", "optimizer", "run", "skipped", "taken")

    optimizer: Any
    closure: Callable[[], Any] | None
    index: int
    taken: int
    run: AcceleratorState | None
    kwargs: dict[str, Any]
    skipped: bool

    def __init__(
        self,
        optimizer: Any,
        closure: Callable[[], Any] | None,
        index: int,
        run: AcceleratorState | None = None,
        *,
        taken: int | None = None,
    ) -> None:
        """``taken`` defaults to ``index`` (a context built by hand: no step was skipped)."""
        self.optimizer = optimizer
        self.closure = closure
        self.index = index
        self.taken = index if taken is None else taken
        self.run = run
        self.kwargs = {}
        self.skipped = True

    def agree(self, flag: bool, *, how: Literal["any", "all"] = "any") -> bool:
        """``flag`` agreed by every process: ``True`` on every rank when it is on any rank
        (``how="all"``: only when it is on every rank).

        An all-reduce over the run's process group, so every rank must call it, the same
        number of times: call it before any rank-local decision, from an ``around_step``
        composed outside the ones that may skip (``before = (<the loss scaler's name>,)``) or from an
        ``after_step``. With one process (or a context built without a run) it returns
        ``flag``.
        """
        if self.run is None:
            return bool(flag)
        return self.run.agree(flag, how=how)

    def agree_value(
        self, value: float, *, op: Literal["sum", "mean", "max", "min"] = "mean"
    ) -> float:
        """``value`` combined over every process by ``op`` (``"mean"``, ``"sum"``, ``"max"``,
        ``"min"``): the same float on every rank, for a number a decision rests on (a
        gradient norm, a count of non-finite values). Every rank calls it, as often, with the
        rules of :meth:`agree`. With one process (or a context built without a run) it returns
        ``float(value)``."""
        if self.run is None:
            return float(value)
        return self.run.agree_value(value, op=op)

    def __repr__(self) -> str:
        return f"StepContext(index={self.index}, taken={self.taken}, skipped={self.skipped})"


#: ``around_step``: ``around(step, proceed) -> result``; not calling ``proceed()`` skips the step.
AroundStep = Callable[[StepContext, Callable[[], Any]], Any]
#: ``after_step``: ``after(step)``, called after every step (``step.skipped`` says if it moved).
AfterStep = Callable[[StepContext], None]
