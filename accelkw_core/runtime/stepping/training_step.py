"""The training step: forward contexts, backward, gradient accumulation, clipping, the step chain.

:class:`Stepping` is the ``Accelerator``'s collaborator for what happens between two batches:
``autocast``, ``backward`` (through the ``loss`` and ``around_backward`` points), ``accumulate`` and
``no_sync`` over the :class:`~accelkw_core.runtime.accumulation.GradientState`, and unscaling
and clipping gradients. :func:`build_step` makes a prepared optimizer's ``step()`` one chain of
the ``around_step`` and ``after_step`` contributions, built once per optimizer, so a step with no
contribution costs one call more than ``optimizer.step()``.

Nothing here imports torch at module import time.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.contributions import AroundBackward, Backward, LossTransform
from accelkw_core.contract.points import AROUND_BACKWARD, BACKWARD, FORWARD_CONTEXT, LOSS, NO_SYNC
from accelkw_core.contract.step import AfterStep, AroundStep, StepContext
from accelkw_core.runtime.composing.planning import override_values
from accelkw_core.runtime.stepping import clipping
from accelkw_core.runtime.stepping.forward import forward_contexts

if TYPE_CHECKING:
    from accelkw_core.runtime.accumulation import GradientState
    from accelkw_core.runtime.preparing.prepared import Prepared
    from accelkw_core.runtime.run_state import RunState

__all__ = ["Stepping", "build_step", "run_backward"]


class Stepping:
    """The step of one run: ``state``'s contributions, ``gradient_state``'s facts.

    ``prepared`` gives the optimizers whose gradients ``unscale_gradients`` unscales by default.
    """

    def __init__(self, state: RunState, gradient_state: GradientState, prepared: Prepared) -> None:
        self.state = state
        self.gradient_state = gradient_state
        self.prepared = prepared
        # The hot paths read their points once per version of the state, not per call, each
        # with the version it was read at in one tuple (one attribute read and one comparison
        # per call): backward's three points, and autocast's contexts as one factory.
        self._backward: tuple[
            int, tuple[LossTransform, ...], tuple[AroundBackward, ...], Backward | None
        ] = (-1, (), (), None)
        self._forward: tuple[int, Callable[[], AbstractContextManager[Any]]] = (
            -1,
            contextlib.nullcontext,
        )

    # -- the facts of gradient accumulation ------------------------------------------------------

    # -- forward and backward --------------------------------------------------------------------

    def autocast(self, autocast_handler: Any) -> AbstractContextManager[Any]:
        """The forward contexts, or those ``autocast_handler`` contributes on this run's facts."""
        if autocast_handler is None:
            forward = self._forward
            version = self.state.version
            if forward[0] != version:
                factories = self.state.values(FORWARD_CONTEXT)
                # One contribution (the common case) is entered as it is, with no frame around.
                factory = (
                    factories[0]
                    if len(factories) == 1
                    else functools.partial(forward_contexts, factories)
                )
                forward = self._forward = (version, factory)
            return forward[1]()
        return forward_contexts(
            override_values(self.state, autocast_handler, FORWARD_CONTEXT, "autocast")
        )

    def backward(self, loss: Any, **kwargs: Any) -> None:
        """Divide by the accumulation steps, pass through the ``loss`` points, backpropagate."""
        steps = self.gradient_state.num_steps
        if steps != 1:
            loss = loss / steps
        points = self._backward
        version = self.state.version
        if points[0] != version:
            state = self.state
            owner = state.values(BACKWARD)
            points = (
                version,
                tuple(state.values(LOSS)),
                tuple(state.values(AROUND_BACKWARD)),
                owner[0] if owner else None,
            )
            self._backward = points
        for transform in points[1]:
            loss = transform(loss)
        if points[2] or points[3] is not None:
            run_backward(points[2], points[3], loss, kwargs)
        else:
            loss.backward(**kwargs)

    # -- accumulation ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self, model: Any) -> Iterator[None]:
        """Hold back gradient synchronisation of ``model`` in the block."""
        with self._suspend(model):
            yield

    def _suspend(self, model: Any) -> AbstractContextManager[Any]:
        contributed = self.state.values(NO_SYNC)
        if contributed:
            manager: AbstractContextManager[Any] = contributed[0](model)
            return manager
        own = getattr(model, "no_sync", None) if self.state.distributed else None
        return own() if own is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def accumulate(self, *models: Any) -> Iterator[None]:
        """One micro-step: the policy sets ``sync_gradients``; unsynced, ``models`` hold back."""
        gradient_state = self.gradient_state
        gradient_state.advance()
        with contextlib.ExitStack() as stack:
            if gradient_state.holds_back(self.state.distributed):
                for model in models:
                    stack.enter_context(self._suspend(model))
            yield

    # -- gradients -------------------------------------------------------------------------------

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale the gradients of ``optimizer`` (a list, or every prepared one for ``None``)."""
        if optimizer is None:
            optimizers = self.prepared.optimizers
        elif isinstance(optimizer, list | tuple):
            optimizers = list(optimizer)
        else:
            optimizers = [optimizer]
        clipping.unscale(self.state, optimizers)

    def clip_grad_norm_(self, parameters: Iterable[Any], max_norm: float, norm_type: float) -> Any:
        """Unscale every prepared optimizer's gradients, clip by norm; returns the total norm."""
        self.unscale_gradients()
        return clipping.clip_norm(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        """Unscale every prepared optimizer's gradients, clip by value."""
        import torch

        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether a prepared optimizer skipped its last step (a loss scaler found inf/NaN)."""
        return any(getattr(o, "step_was_skipped", False) for o in self.prepared.optimizers)


# -- the optimizer step's chain ------------------------------------------------------------------


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


def run_backward(
    arounds: Sequence[AroundBackward],
    backward: Backward | None,
    loss: Any,
    kwargs: dict[str, Any],
) -> None:
    """Run ``loss``'s backward through the ``around_backward`` chain, the first outermost.

    Each contribution gets the loss and ``proceed``; the innermost ``proceed(loss)`` runs the
    deprecated ``backward`` contribution, if any, else ``loss.backward(**kwargs)``.
    """

    def at(index: int, value: Any) -> None:
        if index == len(arounds):
            if backward is None:
                value.backward(**kwargs)
            else:
                backward(value, **kwargs)
        else:
            arounds[index](value, functools.partial(at, index + 1))

    at(0, loss)
