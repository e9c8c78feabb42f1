"""Composition: the user's handlers plus defaults, ordered by constraints, applied all or nothing."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from accelkw_core.config.selection import handler_key, resolve_handlers
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import HandlerApplyError, PointConflictError
from accelkw_core.runtime.state import AcceleratorState

if TYPE_CHECKING:
    from accelkw_core.config.settings import Settings

__all__ = ["compose"]


def compose(
    state: AcceleratorState,
    handlers: Sequence[object] = (),
    *,
    registry: Registry | None = None,
    include_defaults: bool = True,
    disabled: Iterable[str] = (),
    settings: Settings | None = None,
) -> list[KwargsHandler]:
    """Apply handlers to ``state`` in order; return them in the order applied.

    With ``settings`` (from :func:`~accelkw_core.config.settings.resolve_settings`), its
    handlers are applied as they are: already built, checked and ordered. Otherwise ``handlers``
    are resolved and ordered here (see :func:`resolve_handlers`).

    If an ``apply`` raises, the teardowns registered so far run in reverse, the state's
    contributions are dropped, and :class:`HandlerApplyError` names the handler and its
    distribution (two contributions to a point that takes one raise
    :class:`~accelkw_core.errors.PointConflictError` as it is).
    """
    registry = registry if registry is not None else get_registry()
    if settings is not None:
        ordered = [hs.handler for hs in settings.handlers]
        dists = {hs.name: hs.distribution for hs in settings.handlers}
    else:
        ordered = resolve_handlers(
            handlers, registry=registry, include_defaults=include_defaults, disabled=disabled
        )
        dists = {}
        for handler in ordered:
            info = registry.info_for(type(handler))
            dists[handler_key(handler)] = info.distribution if info else None
    for handler in ordered:
        name = handler_key(handler)
        state.distributions[name] = dists.get(name)
        started = time.perf_counter()
        try:
            handler.apply(state)
        except PointConflictError as exc:
            _rollback(state, exc)
            raise
        except Exception as exc:
            _rollback(state, exc)
            raise HandlerApplyError(name, dists.get(name), exc) from exc
        state.timed(name, "apply", started)
        state.handlers[name] = handler
    try:
        _state_ready(registry, state)
    except Exception as exc:
        _rollback(state, exc)
        raise HandlerApplyError("accelkw_state_ready", None, exc) from exc
    return ordered


def _state_ready(registry: Registry, state: AcceleratorState) -> None:
    # Only plugins whose handlers take part in this run hear about it (plugins that contribute
    # no handler, such as a logger, always do).
    composed = set(state.handlers)
    left_out = [
        rec.plugin
        for rec in registry.plugins()
        if rec.plugin is not None and rec.handlers and not {c.name for c in rec.handlers} & composed
    ]
    hook = registry.hook
    caller = (
        registry.pm.subset_hook_caller("accelkw_state_ready", left_out)
        if left_out
        else hook.accelkw_state_ready
    )
    caller(state=state)


def _rollback(state: AcceleratorState, cause: Exception) -> None:
    for name, err in state.run_teardowns():
        cause.add_note(f"while undoing, the teardown of {name!r} also failed: {err!r}")
    state.reset_points()
