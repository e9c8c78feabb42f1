"""Plugins a run goes without, said out loud: failed to load, in conflict, or incompatible.

Without these warnings a broken or conflicting plugin only shows in ``accelkw plugins list``,
and a run quietly goes without it: a second distribution that also registers ``ddp`` would
leave a 2-process run unsynchronised. ``Accelerator()``, ``accelkw plan``, ``config check`` and
``launch`` all resolve settings, and so all warn: once per launch, not once per process.
``accelkw launch`` warns, then tells its workers what it warned about (``ACCELKW_LAUNCH_WARNED``),
and a worker started otherwise (torchrun, ``accelerate launch``) warns on its machine's local
main process only: every process of a machine sees the same installed plugins.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping

from accelkw_core.discovery.catalog import HANDLER_DISTRIBUTIONS
from accelkw_core.discovery.records import PluginRecord
from accelkw_core.errors import IncompatiblePluginWarning, PluginLoadWarning

__all__ = [
    "WARNED_ENV",
    "handler_troubles",
    "trouble_keys",
    "trouble_text",
    "warn_troubles",
]

#: Set by ``accelkw launch`` for its workers: the troubles it warned about (``name:status``).
WARNED_ENV = "ACCELKW_LAUNCH_WARNED"

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


def trouble_keys(records: Iterable[PluginRecord], skip: Iterable[str] = ()) -> list[str]:
    """``name:status`` of each plugin a run goes without, as :func:`warn_troubles` warns."""
    left_out = set(skip)
    keys = []
    for record in records:
        if record.status not in _STATUSES or record.name in left_out:
            continue
        if record.handlers and {c.name for c in record.handlers} <= left_out:
            continue
        keys.append(f"{record.name}:{record.status}")
    return keys


def warn_troubles(
    records: Iterable[PluginRecord],
    skip: Iterable[str] = (),
    stacklevel: int = 2,
    env: Mapping[str, str] | None = None,
) -> None:
    """Warn about each plugin a run goes without (of a registry's ``plugins()``), unless the
    run disabled it (``skip``), the launcher warned already, or another process of this machine
    warns (see the module's docstring)."""
    env = os.environ if env is None else env
    if env.get("LOCAL_RANK", "0").strip() not in ("", "0") and WARNED_ENV not in env:
        return
    warned = set(env.get(WARNED_ENV, "").split(","))
    records = list(records)
    keys = set(trouble_keys(records, skip)) - warned
    for record in records:
        if f"{record.name}:{record.status}" not in keys:
            continue
        category = (
            IncompatiblePluginWarning if record.status == "incompatible" else PluginLoadWarning
        )
        warnings.warn(category(trouble_text(record)), stacklevel=stacklevel + 1)
