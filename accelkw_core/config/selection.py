"""Which handlers a run composes: the user's plus installed defaults, in constraint order.

Pure selection over handler classes and the registry; applying them to a state is
:mod:`accelkw_core.runtime.composing.composition`'s job.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.catalog import install_hint
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import ComposeError

__all__ = ["conflicting_defaults", "handler_key", "order_handlers", "resolve_handlers"]


def handler_key(handler: KwargsHandler) -> str:
    """The registry name of a handler, or its class name when it has none (code-only handlers)."""
    return type(handler).name or type(handler).__name__


def resolve_handlers(
    handlers: Sequence[object] = (),
    *,
    registry: Registry | None = None,
    include_defaults: bool = True,
    disabled: Iterable[str] = (),
    order: bool = True,
) -> list[KwargsHandler]:
    """The user's handlers plus a default instance of every other enabled installed handler.

    With ``order`` (the default) they are ordered and checked by :func:`order_handlers`;
    without, they come back as given (for a caller that orders a larger set later).

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
        defaults = {
            name: info.cls
            for name, info in registry.handlers().items()
            if name not in chosen and name not in off and not info.cls.opt_in
        }
        left_out = conflicting_defaults({n: type(h) for n, h in chosen.items()}, defaults)
        chosen.update((n, cls()) for n, cls in defaults.items() if n not in left_out)
    return order_handlers(chosen.values()) if order else list(chosen.values())


def conflicting_defaults(
    requested: Mapping[str, type[KwargsHandler]], defaults: Mapping[str, type[KwargsHandler]]
) -> dict[str, str]:
    """Default handlers left out because a requested one conflicts with them: name -> why.

    Two requested handlers that conflict stay an error (:func:`order_handlers`); a default
    instance (an installed handler nobody asked for) gives way, so requesting ``fsdp`` with
    accelkw-ddp installed drops the default ``ddp`` instead of failing every run.
    """
    out: dict[str, str] = {}
    for name, cls in sorted(defaults.items()):
        for other, other_cls in sorted(requested.items()):
            if other in cls.conflicts or name in other_cls.conflicts:
                out[name] = f"left out: the requested handler {other!r} conflicts with it"
                break
    return out


def order_handlers(handlers: Iterable[KwargsHandler]) -> list[KwargsHandler]:
    """Order handlers by their ``after``/``before`` names, ties broken by name.

    ``requires`` names must be among ``handlers`` (a :class:`ComposeError` names the missing one
    and the pip line that installs it); ``conflicts`` names must not be (the error names both
    handlers); a cycle of constraints is an error that lists it.
    """
    by_name = {handler_key(h): h for h in handlers}
    _check_requires_and_conflicts(by_name)
    indegree = dict.fromkeys(by_name, 0)
    followers: dict[str, set[str]] = {n: set() for n in by_name}

    def edge(first: str, then: str) -> None:
        if first in by_name and then in by_name and first != then and then not in followers[first]:
            followers[first].add(then)
            indegree[then] += 1

    for name, handler in by_name.items():
        cls = type(handler)
        for earlier in cls.after:
            edge(earlier, name)
        for later in cls.before:
            edge(name, later)
    ready = [n for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    ordered: list[KwargsHandler] = []
    while ready:
        name = heapq.heappop(ready)
        ordered.append(by_name[name])
        for nxt in sorted(followers[name]):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(ordered) < len(by_name):
        cycle = sorted(n for n, d in indegree.items() if d > 0)
        raise ComposeError(
            "handler ordering constraints form a cycle among: "
            + ", ".join(f"{n} ({_constraints(type(by_name[n]))})" for n in cycle)
        )
    return ordered


def _constraints(cls: type[KwargsHandler]) -> str:
    parts = [f"{k} {list(getattr(cls, k))}" for k in ("after", "before") if getattr(cls, k)]
    return ", ".join(parts) or "no constraints"


def _check_requires_and_conflicts(by_name: dict[str, KwargsHandler]) -> None:
    for name, handler in sorted(by_name.items()):
        cls = type(handler)
        for needed in cls.requires:
            if needed not in by_name:
                raise ComposeError(
                    f"handler {name!r} requires handler {needed!r}, which is not composed "
                    f"(not installed or disabled): {install_hint(needed)}, or enable it"
                )
        for other in cls.conflicts:
            if other in by_name:
                raise ComposeError(
                    f"handlers {name!r} and {other!r} cannot be composed together "
                    f"({cls.__name__} declares conflicts={list(cls.conflicts)}); pass or enable "
                    "only one of them, e.g. disable the other with [plugins] disable"
                )
