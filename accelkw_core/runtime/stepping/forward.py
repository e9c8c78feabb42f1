"""A prepared model's forward under the ``forward_context`` contributions, then ``forward_output``.

The contexts are resolved once, at ``prepare``, into one plain function, so a forward pays what
a hand-written ``with torch.autocast(...)`` pays: one context for the common case of one
contribution, an ``ExitStack`` only when several handlers contribute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.contributions import ForwardContext, OutputConverter
from accelkw_core.contract.points import FORWARD_CONTEXT, FORWARD_OUTPUT

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = ["forward_contexts", "patch_forward", "unpatch_forward"]

ContextFactory = ForwardContext
_ORIGINAL = "_accelkw_original_forward"


@contextlib.contextmanager
def _nested(factories: Sequence[ContextFactory]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for factory in factories:
            stack.enter_context(factory())
        yield


def forward_contexts(factories: Sequence[ContextFactory]) -> AbstractContextManager[Any]:
    """One context manager entering every factory's context, the first outermost."""
    if not factories:
        return contextlib.nullcontext()
    if len(factories) == 1:
        return factories[0]()
    return _nested(factories)


def _wrapped_forward(
    forward: Callable[..., Any],
    factories: Sequence[ContextFactory],
    outputs: Sequence[OutputConverter],
) -> Callable[..., Any]:
    if len(factories) == 1 and len(outputs) == 1:
        # The common case (mixed precision): one frame around the forward, as a hand-written
        # `with torch.autocast(...)` plus the output cast would be.
        context, convert = factories[0], outputs[0]

        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with context():
                result = forward(*args, **kwargs)
            return convert(result)

        return autocast_forward
    if len(factories) == 1:
        only = factories[0]

        def inner(*args: Any, **kwargs: Any) -> Any:
            with only():
                return forward(*args, **kwargs)

    elif factories:
        many = tuple(factories)

        def inner(*args: Any, **kwargs: Any) -> Any:
            with _nested(many):
                return forward(*args, **kwargs)

    else:
        inner = forward
    if not outputs:
        return inner
    converters = tuple(outputs)

    def converted(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        for convert in converters:
            result = convert(result)
        return result

    return converted


def patch_forward(model: Any, state: RunState) -> None:
    """Make ``model.forward`` run under the state's forward contexts and output converters.

    The original bound ``forward`` is kept, so :func:`unpatch_forward` restores it; a model
    patched before is patched again from its original, never twice over.
    """
    factories = state.values(FORWARD_CONTEXT)
    outputs = state.values(FORWARD_OUTPUT)
    if not factories and not outputs:
        return
    original = model.__dict__.get(_ORIGINAL) or model.forward
    forward = _wrapped_forward(original, factories, outputs)
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    model.__dict__[_ORIGINAL] = original
    model.forward = forward


def unpatch_forward(model: Any) -> None:
    """Give ``model`` back its original forward (``unwrap_model(keep_fp32_wrapper=False)``)."""
    original = model.__dict__.pop(_ORIGINAL, None)
    if original is not None:
        model.__dict__.pop("forward", None)
