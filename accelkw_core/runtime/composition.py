"""Composition: the user's handlers plus defaults, ordered by constraints, applied all or nothing."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from accelkw_core.discovery.registry import Registry, get_registry
from accelkw_core.errors import ComposeError, HandlerApplyError
from accelkw_core.handlers.base import KwargsHandler
from accelkw_core.runtime.state import AcceleratorState

__all__ = ["compose", "handler_key", "order_handlers", "resolve_handlers"]


def handler_key(handler: KwargsHandler) -> str:
    """The registry name of a handler, or its class name when it has none (code-only handlers)."""
    return type(handler).name or type(handler).__name__


def resolve_handlers(
    handlers: Sequence[object] = (),
    *,
    registry: Registry | None = None,
    include_defaults: bool = True,
    disabled: Iterable[str] = (),
) -> list[KwargsHandler]:
    """The user's handlers plus a default instance of every other enabled installed handler.

    Raises :class:`ComposeError` (a ``ValueError``) for a non-handler object, two handlers of one
    class, or two handlers that claim one registry name.
    """
    registry = registry if registry is not None else get_registry()
    chosen: dict[str, KwargsHandler] = {}
    seen_classes: set[type] = set()
    for i, handler in enumerate(handlers):
        if not isinstance(handler, KwargsHandler):
            raise ComposeError(
                f"kwargs_handlers[{i}]: got {handler!r} ({type(handler).__name__}), "
                "expected a KwargsHandler instance such as AutocastKwargs()"
            )
        cls = type(handler)
        if cls in seen_classes:
            raise ComposeError(f"You can only pass one `{cls.__name__}` in `kwargs_handlers`.")
        seen_classes.add(cls)
        key = handler_key(handler)
        if key in chosen:
            other = type(chosen[key]).__name__
            raise ComposeError(
                f"`{cls.__name__}` and `{other}` both configure {key!r}; "
                "pass only one of them in `kwargs_handlers`."
            )
        chosen[key] = handler
    off = set(disabled)
    if include_defaults:
        for name, info in registry.handlers().items():
            if name not in chosen and name not in off:
                chosen[name] = info.cls()
    return order_handlers(chosen.values())


def order_handlers(handlers: Iterable[KwargsHandler]) -> list[KwargsHandler]:
    """Topological order by each class's ``after`` names, ties broken by name; cycles raise."""
    by_name = {handler_key(h): h for h in handlers}
    indegree = dict.fromkeys(by_name, 0)
    followers: dict[str, list[str]] = {n: [] for n in by_name}
    for name, handler in by_name.items():
        for before in dict.fromkeys(type(handler).after):
            if before in by_name and before != name:
                followers[before].append(name)
                indegree[name] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    ordered: list[KwargsHandler] = []
    while ready:
        name = heapq.heappop(ready)
        ordered.append(by_name[name])
        for nxt in followers[name]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(ordered) < len(by_name):
        cycle = sorted(n for n, d in indegree.items() if d > 0)
        raise ComposeError(
            "handler ordering constraints form a cycle among: "
            + ", ".join(f"{n} (after {list(type(by_name[n]).after)})" for n in cycle)
        )
    return ordered


def compose(
    state: AcceleratorState,
    handlers: Sequence[object] = (),
    *,
    registry: Registry | None = None,
    include_defaults: bool = True,
    disabled: Iterable[str] = (),
) -> list[KwargsHandler]:
    """Resolve, order and apply handlers to ``state``; return them in the order applied.

    If an ``apply`` raises, the teardowns registered so far run in reverse, the state's slots are
    emptied, and :class:`HandlerApplyError` names the handler and its distribution.
    """
    registry = registry if registry is not None else get_registry()
    ordered = resolve_handlers(
        handlers, registry=registry, include_defaults=include_defaults, disabled=disabled
    )
    for handler in ordered:
        name = handler_key(handler)
        try:
            handler.apply(state)
        except Exception as exc:
            _rollback(state, exc)
            info = registry.info_for(type(handler))
            raise HandlerApplyError(name, info.distribution if info else None, exc) from exc
        state.handlers[name] = handler
    try:
        registry.hook.accelkw_state_ready(state=state)
    except Exception as exc:
        _rollback(state, exc)
        raise HandlerApplyError("accelkw_state_ready", None, exc) from exc
    return ordered


def _rollback(state: AcceleratorState, cause: Exception) -> None:
    for name, err in state.run_teardowns():
        cause.add_note(f"while undoing, the teardown of {name!r} also failed: {err!r}")
    state.reset_slots()
