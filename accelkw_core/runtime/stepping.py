"""The optimizer step as a chain: around-step contributions nested, then after-step callbacks.

Built once per prepared optimizer, so a step with no contribution costs one call more than
``optimizer.step()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["AroundStep", "StepContext", "build_step"]


class StepContext:
    """What an around-step or after-step contribution sees of one optimizer step.

    ``optimizer`` is the optimizer being stepped (after every optimizer wrapper, before the
    runtime's own); ``closure`` the closure passed to ``step``; ``index`` counts the steps
    taken through this optimizer, from 0. ``skipped`` is ``True`` once the step did not change
    the parameters: an around-step contribution did not call ``proceed()``. ``kwargs`` go to
    the innermost ``optimizer.step`` (a contribution may add some, as a loss scaler does
    for fused optimizers).
    """

    __slots__ = ("closure", "index", "kwargs", "optimizer", "skipped")

    def __init__(self, optimizer: Any, closure: Callable[[], Any] | None, index: int) -> None:
        self.optimizer = optimizer
        self.closure = closure
        self.index = index
        self.kwargs: dict[str, Any] = {}
        self.skipped = True

    def __repr__(self) -> str:
        return f"StepContext(index={self.index}, skipped={self.skipped})"


AroundStep = Callable[[StepContext, Callable[[], Any]], Any]


def _innermost(step: StepContext) -> Any:
    step.skipped = False
    optimizer = step.optimizer
    if step.closure is not None:
        return optimizer.step(step.closure, **step.kwargs)
    return optimizer.step(**step.kwargs)


def _nest(around: AroundStep, inner: Callable[[StepContext], Any]) -> Callable[[StepContext], Any]:
    def call(step: StepContext) -> Any:
        return around(step, lambda: inner(step))

    return call


def build_step(
    around: Sequence[AroundStep], after: Sequence[Callable[[StepContext], None]]
) -> Callable[[StepContext], Any]:
    """One callable that runs ``around`` nested (the first outermost), then ``after`` in order."""
    chain: Callable[[StepContext], Any] = _innermost
    for contribution in reversed(around):
        chain = _nest(contribution, chain)
    if not after:
        return chain
    inner = chain
    callbacks = tuple(after)

    def with_after(step: StepContext) -> Any:
        result = inner(step)
        for callback in callbacks:
            callback(step)
        return result

    return with_after
