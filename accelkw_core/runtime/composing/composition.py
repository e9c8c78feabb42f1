"""Composition: the user's handlers plus defaults, ordered by constraints, applied all or nothing."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from accelkw_core.config.selection import handler_key, resolve_handlers
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import HandlerApplyError, PointConflictError
from accelkw_core.runtime.composing.planning import plan_conflicts, plan_handler
from accelkw_core.runtime.run_state import RunState

if TYPE_CHECKING:
    from accelkw_core.config.settings import Settings

__all__ = ["compose"]


def compose(
    state: RunState,
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
        origins = {hs.name: hs.origin for hs in settings.handlers}
    else:
        ordered = resolve_handlers(
            handlers, registry=registry, include_defaults=include_defaults, disabled=disabled
        )
        dists = {}
        passed = {id(h) for h in handlers}
        origins = {}
        for handler in ordered:
            info = registry.info_for(type(handler))
            dists[handler_key(handler)] = info.distribution if info else None
            origins[handler_key(handler)] = "code" if id(handler) in passed else "default"
    for handler in ordered:
        name = handler_key(handler)
        state.distributions[name] = dists.get(name)
        started = time.perf_counter()
        try:
            handler.apply(state)
        except PointConflictError as exc:
            _rollback(state, exc)
            full = _whole_conflict(exc, state, ordered, dists, origins)
            if full is exc:
                raise
            raise full from None
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


def _state_ready(registry: Registry, state: RunState) -> None:
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


def _whole_conflict(
    exc: PointConflictError,
    state: RunState,
    ordered: Sequence[KwargsHandler],
    dists: Mapping[str, str | None],
    origins: Mapping[str, str],
) -> PointConflictError:
    """The conflict as ``accelkw plan`` reports it: every contributor to the point (the state
    saw the first two), each with its origin, from the same plans apply carried out."""
    scratch = state.scratch()
    plans = [plan_handler(handler_key(h), h, scratch) for h in ordered]
    who = {name: (dist, origins.get(name)) for name, dist in dists.items()}
    for found in plan_conflicts(plans, who):
        named = {c.handler for c in found.contributors}
        if (
            found.point == exc.point
            and found.key == exc.key
            and {exc.first[0], exc.second[0]} <= named
        ):
            return found
    # A handler that overrides apply() plans nothing visible: name the two the state saw.
    return PointConflictError.of(
        exc.point, [c._replace(origin=origins.get(c.handler)) for c in exc.contributors], exc.key
    )


def _rollback(state: RunState, cause: Exception) -> None:
    for name, err in state.run_teardowns():
        cause.add_note(f"while undoing, the teardown of {name!r} also failed: {err!r}")
    state.reset_points()
