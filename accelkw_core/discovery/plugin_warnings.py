"""Plugins a run goes without, said out loud: failed to load, in conflict, or incompatible.

Without these warnings a broken or conflicting plugin only shows in ``accelkw plugins list``,
and a run quietly goes without it: a second distribution that also registers ``ddp`` would
leave a 2-process run unsynchronised. ``Accelerator()``, ``accelkw plan``, ``config check`` and
``launch`` all resolve settings, and so all warn.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from accelkw_core.discovery.catalog import HANDLER_DISTRIBUTIONS
from accelkw_core.discovery.records import PluginRecord
from accelkw_core.errors import IncompatiblePluginWarning, PluginLoadWarning

__all__ = ["handler_troubles", "trouble_text", "warn_troubles"]

_STATUSES = ("failed", "conflict", "incompatible")


def _deny(record: PluginRecord) -> str:
    return f"ACCELKW_DISABLE_PLUGINS={record.distribution or record.name}"


def trouble_text(record: PluginRecord) -> str:
    """One line: which plugin, why the run goes without it, and what fixes it."""
    who = f"plugin {record.name!r}" + (f" ({record.distribution})" if record.distribution else "")
    if record.status == "conflict":
        return (
            f"{who} is in conflict, so this run goes without it: {record.reason}; keep one of "
            f"them by uninstalling or denying the other (e.g. {_deny(record)})"
        )
    if record.status == "failed":
        return (
            f"{who} failed to load, so this run goes without it: {record.reason}; fix or "
            f"uninstall it, or deny it to silence this ({_deny(record)})"
        )
    return f"{who} was not loaded, so this run goes without it: {record.reason}"


def handler_troubles(records: Iterable[PluginRecord]) -> dict[str, str]:
    """Handler name -> why it is missing from runs although installed (conflict, failed load,
    a deny-list), from a registry's ``plugins()``.

    A name two distributions claim is known from their records; a built-in whose distribution
    failed to load is known from the catalog, since it never got to register its handler.
    """
    claims: dict[str, list[PluginRecord]] = {}
    out: dict[str, str] = {}
    for record in records:
        if record.status == "conflict":
            for cls in record.handlers:
                claims.setdefault(cls.name, []).append(record)
        elif record.status in ("failed", "incompatible", "disabled"):
            for name, dist in HANDLER_DISTRIBUTIONS.items():
                if record.distribution != dist:
                    continue
                if record.status == "disabled":
                    out[name] = f"the {name!r} handler is disabled ({record.reason})"
                else:
                    out[name] = f"{dist} is installed but was not loaded: {record.reason}"
    for name, records in claims.items():
        dists = [r.distribution or r.name for r in records]
        out[name] = (
            f"the {name!r} handler is claimed by {' and '.join(dists)}, so neither is used; "
            f"keep one by uninstalling or denying the other (e.g. {_deny(records[-1])})"
        )
    return out


def warn_troubles(
    records: Iterable[PluginRecord], skip: Iterable[str] = (), stacklevel: int = 2
) -> None:
    """Warn about each plugin a run goes without (of a registry's ``plugins()``), unless the
    run disabled it (``skip``)."""
    left_out = set(skip)
    for record in records:
        if record.status not in _STATUSES or record.name in left_out:
            continue
        if record.handlers and {c.name for c in record.handlers} <= left_out:
            continue
        category = (
            IncompatiblePluginWarning if record.status == "incompatible" else PluginLoadWarning
        )
        warnings.warn(category(trouble_text(record)), stacklevel=stacklevel + 1)
