"""The optimizer step as a chain: around-step contributions nested, then after-step callbacks.

Built once per prepared optimizer, so a step with no contribution costs one call more than
``optimizer.step()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from accelkw_core.contract.step import AfterStep, AroundStep, StepContext

__all__ = ["build_step"]


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
    around: Sequence[AroundStep], after: Sequence[AfterStep]
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
