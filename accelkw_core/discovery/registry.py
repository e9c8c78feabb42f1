"""Discovery and loading of plugins (handlers and trackers): entry points in, a pluggy manager and
a status each.

A plugin is a module (or any object) with ``accelkw_*`` hook implementations, found through the
``accelkw`` entry-point group or registered in code. Loading is isolated: a plugin that fails in
any way is recorded with its reason and skipped; the rest keep working.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pluggy

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.contract.tracker import GeneralTracker
from accelkw_core.discovery import compat, hookspecs
from accelkw_core.discovery.entry_points import PluginEntryPoint, find_entry_points
from accelkw_core.discovery.plugin_warnings import warn_troubles
from accelkw_core.discovery.records import (
    CONFLICT,
    DISABLED,
    FAILED,
    INCOMPATIBLE,
    LOADED,
    HandlerInfo,
    PluginRecord,
    TrackerInfo,
    check_handler_class,
    check_tracker_class,
    exception_text,
    normalize_name,
)
from accelkw_core.errors import (
    ConfigWarning,
    InvalidTrackerError,
    PluginError,
    UnknownHandlerError,
    suggest,
)
from accelkw_core.facts.environment import env_flag

__all__ = [
    "ENTRY_POINT_GROUP",
    "HandlerInfo",
    "PluginRecord",
    "Registry",
    "TrackerInfo",
]

ENTRY_POINT_GROUP = "accelkw"
ENV_ALLOW = "ACCELKW_PLUGINS"
ENV_DENY = "ACCELKW_DISABLE_PLUGINS"
ENV_NO_AUTOLOAD = "ACCELKW_DISABLE_PLUGIN_AUTOLOAD"


class Registry:
    """The plugins of one process: discovered lazily, once, and kept with their status.

    ``allow``/``deny`` (plugin or distribution names) default to the ``ACCELKW_PLUGINS`` and
    ``ACCELKW_DISABLE_PLUGINS`` environment variables and are applied before any plugin module
    is imported. ``autoload=False`` (or ``ACCELKW_DISABLE_PLUGIN_AUTOLOAD=1``) reads no entry
    points; :meth:`register_plugin` adds plugin objects in code either way. Entry points and
    their distributions' metadata are read with ``importlib_metadata``
    (:mod:`accelkw_core.discovery.entry_points`).
    """

    def __init__(
        self,
        *,
        autoload: bool | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        env: Mapping[str, str] | None = None,
        group: str = ENTRY_POINT_GROUP,
    ) -> None:
        env = os.environ if env is None else env
        if autoload is None:
            off = env_flag(env, ENV_NO_AUTOLOAD, handler="plugins", field="disable_autoload")
            autoload = not off
        self.autoload = autoload
        self.allow = set(allow) if allow is not None else _names_in(env.get(ENV_ALLOW))
        self.deny = set(deny) if deny is not None else (_names_in(env.get(ENV_DENY)) or set())
        self._list_names = {
            "allow": ENV_ALLOW if allow is None else "the allow-list",
            "deny": ENV_DENY if deny is None else "the deny-list",
        }
        self.group = group
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        # accelkw_register_handlers is historic: pluggy calls each plugin's implementation once,
        # as the plugin is registered (now or later), with this callback. The plugin being
        # registered is the one whose record the callback fills.
        self._registering: PluginRecord | None = None
        # Which hook is running, from pluggy's own call monitoring: when a registration hook
        # raises, the record names it (pluggy calls both registration hooks as a plugin
        # registers).
        self._calling: str | None = None
        self.pm.add_hookcall_monitoring(self._before_hook, self._after_hook)
        self.pm.hook.accelkw_register_handlers.call_historic(
            kwargs={"register": self._register_handler}
        )
        self.pm.hook.accelkw_register_trackers.call_historic(
            kwargs={"register": self._register_tracker}
        )
        self._records: dict[str, PluginRecord] = {}
        self._handlers: dict[str, HandlerInfo] | None = None
        self._trackers: dict[str, TrackerInfo] = {}
        self._loaded = False
        self._warned_incompatible = False

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> Registry:
        """Discover and load entry-point plugins, once; later calls do nothing."""
        if self._loaded:
            return self
        self._loaded = True
        if self.autoload:
            found = find_entry_points(self.group)
            self._warn_unknown_names(found)
            for ep in found:
                self._load_entry_point(ep)
        self._handlers = None
        return self

    def unknown_names(
        self, found: Iterable[PluginEntryPoint] | None = None
    ) -> list[tuple[str, str, str | None]]:
        """``(list, name, close match)`` for each allow/deny name no installed plugin has.

        A name matches a plugin's entry-point name or its distribution's name (``-``/``_``
        and case aside), as :meth:`load` applies them.
        """
        if found is None:
            found = find_entry_points(self.group) if self.autoload else []
        known: dict[str, str] = {}
        for ep in found:
            for name in (ep.name, ep.distribution):
                if name:
                    known.setdefault(normalize_name(name), name)
        out = []
        for key, names in (("allow", self.allow or set()), ("deny", self.deny)):
            for name in sorted(names):
                if normalize_name(name) not in known:
                    hint = suggest(normalize_name(name), known)
                    out.append((self._list_names[key], name, known[hint] if hint else None))
        return out

    def _warn_unknown_names(self, found: list[PluginEntryPoint]) -> None:
        import warnings

        installed = sorted({ep.name for ep in found})
        for where, name, hint in self.unknown_names(found):
            why = f"did you mean {hint!r}?" if hint else f"installed: {', '.join(installed)}"
            warnings.warn(
                f"{where} names {name!r}, which no installed plugin or distribution has "
                f"({why if installed else 'no plugin is installed'})",
                ConfigWarning,
                stacklevel=4,
            )

    def _selected(self, name: str, dist: str | None) -> str | None:
        names = {name, normalize_name(name)}
        if dist:
            names |= {dist, normalize_name(dist)}
        allow = self.allow
        if allow is not None and not names & (allow | {normalize_name(a) for a in allow}):
            return f"not in the allow-list {ENV_ALLOW}={','.join(sorted(allow))}"
        if names & (self.deny | {normalize_name(d) for d in self.deny}):
            return f"in the deny-list {ENV_DENY}"
        return None

    def _load_entry_point(self, ep: PluginEntryPoint) -> None:
        record = PluginRecord(
            name=ep.name, entry_point=ep.value, distribution=ep.distribution, version=ep.version
        )
        if ep.name in self._records:
            other = self._records[ep.name]
            record.fail(
                CONFLICT,
                "PluginNameConflict",
                f"plugin name {ep.name!r} is also used by {other.distribution}; "
                f"both {other.distribution} and {record.distribution} claim it",
            )
            other.fail(CONFLICT, "PluginNameConflict", record.reason)
            if other.plugin is not None:
                self.pm.unregister(other.plugin)
            self._records[f"{ep.name} ({record.distribution})"] = record
            return
        self._records[ep.name] = record
        why_not = self._selected(ep.name, record.distribution)
        if why_not is not None:
            record.status = DISABLED
            record.error = {"type": "Disabled", "message": why_not}
            return
        if not self._check_core(record, ep):
            return
        start = time.perf_counter()
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:
            record.load_ms = (time.perf_counter() - start) * 1000
            record.fail(FAILED, type(exc).__name__, exception_text(exc))
            return
        record.load_ms = (time.perf_counter() - start) * 1000
        self._activate(record, plugin)

    def _check_core(self, record: PluginRecord, ep: PluginEntryPoint) -> bool:
        """Record what the distribution's metadata says of the core; ``False``: do not import."""
        record.core_range = ep.core_range
        if ep.verdict is None or ep.verdict == compat.OK:
            return True
        if ep.verdict not in compat.INCOMPATIBLE_VERDICTS:
            record.note = compat.no_range_note(record.distribution, ep.core_range)
            return True
        from accelkw_core._version import __version__

        spec = ep.core_range or ""
        record.fix = compat.fix_line(record.distribution, spec, ep.verdict)
        record.fail(
            INCOMPATIBLE,
            "IncompatibleCore",
            compat.describe(record.distribution, spec, __version__, ep.verdict),
        )
        return False

    def register_plugin(self, plugin: object, name: str | None = None) -> PluginRecord:
        """Register a plugin object (a module, class or instance) directly, without entry points.

        Returns its record; a plugin that fails validation is recorded as ``failed``, not raised.
        """
        if self.pm.is_registered(plugin):
            for rec in self._records.values():
                if rec.plugin is plugin:
                    return rec
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        record = PluginRecord(name=name, entry_point=None)
        key = name
        while key in self._records:
            key += "'"
        self._records[key] = record
        self._activate(record, plugin)
        self._handlers = None
        return record

    def _activate(self, record: PluginRecord, plugin: object) -> None:
        """Register ``plugin`` with pluggy, which calls its registration hooks (historic)."""
        name = (
            record.name
            if self.pm.get_plugin(record.name) is None
            else f"{record.name}@{id(plugin)}"
        )
        self._registering = record
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:  # a hook's signature or options
            self._reject(record, plugin, type(exc).__name__, exception_text(exc))
            return
        except InvalidTrackerError as exc:  # register() got something that is not a tracker class
            self._reject(record, plugin, "InvalidTracker", exc.reason)
            return
        except PluginError as exc:  # register() got something that is not a handler class
            self._reject(record, plugin, "InvalidHandler", exc.reason)
            return
        except Exception as exc:
            hook = self._calling or "accelkw_register_handlers"
            self._reject(
                record, plugin, type(exc).__name__, f"{hook} raised: {exception_text(exc)}"
            )
            return
        finally:
            self._registering = None
            self._calling = None
        record.plugin = plugin
        unknown = self._unknown_hooks(plugin)
        if unknown:
            self._reject(
                record, plugin, "UnknownHook", f"implements unknown hook(s): {', '.join(unknown)}"
            )

    def _before_hook(
        self, hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]
    ) -> None:
        self._calling = hook_name

    def _after_hook(
        self,
        outcome: pluggy.Result[object],
        hook_name: str,
        impls: Sequence[pluggy.HookImpl],
        kwargs: Mapping[str, object],
    ) -> None:
        # A hook that raised leaves its name for the except clause in _activate to read.
        if outcome.exception is None:
            self._calling = None

    def _register_handler(self, cls: type[KwargsHandler]) -> None:
        """The ``register`` callback of ``accelkw_register_handlers``."""
        record = self._registering
        if record is None:
            raise PluginError(
                getattr(cls, "__module__", "?"),
                None,
                "register() was called outside accelkw_register_handlers; call it from the hook",
            )
        reason = check_handler_class(cls)
        if reason is not None:
            raise PluginError(record.name, record.distribution, reason)
        if cls not in record.handlers:
            record.handlers.append(cls)

    def _register_tracker(self, cls: type[GeneralTracker]) -> None:
        """The ``register`` callback of ``accelkw_register_trackers``."""
        record = self._registering
        if record is None:
            raise PluginError(
                getattr(cls, "__module__", "?"),
                None,
                "register() was called outside accelkw_register_trackers; call it from the hook",
            )
        reason = check_tracker_class(cls)
        if reason is not None:
            raise InvalidTrackerError(record.name, record.distribution, reason)
        if cls not in record.trackers:
            record.trackers.append(cls)

    def _unknown_hooks(self, plugin: object) -> list[str]:
        # Only a hook without a specification can be unknown, so only those are looked at:
        # pm.get_hookcallers(plugin) walks every plugin's implementations of every hook, which
        # made loading n plugins quadratic. An implementation marked optionalhook=True may name a
        # hook this core does not have, as pluggy intends (pm.check_pending skips it too).
        return [
            caller.name
            for caller in vars(self.pm.hook).values()
            if isinstance(caller, pluggy.HookCaller)
            and not caller.has_spec()
            and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
        ]

    def _reject(self, record: PluginRecord, plugin: object, kind: str, message: str) -> None:
        record.fail(FAILED, kind, message)
        record.handlers = []
        record.trackers = []
        record.plugin = None
        if self.pm.is_registered(plugin):
            self.pm.unregister(plugin)

    # -- queries -------------------------------------------------------------------------------

    def plugins(self) -> list[PluginRecord]:
        """Every plugin seen, sorted by name, with its status (after resolving conflicts)."""
        self.load()
        self._resolve()
        return sorted(self._records.values(), key=lambda r: (r.name, r.distribution or ""))

    def handlers(self) -> dict[str, HandlerInfo]:
        """The usable handlers by registry name, sorted; conflicting names are left out."""
        self.load()
        return dict(self._resolve())

    def trackers(self) -> dict[str, TrackerInfo]:
        """The usable trackers by name, sorted; conflicting names are left out."""
        self.load()
        self._resolve()
        return dict(self._trackers)

    def get(self, name: str) -> HandlerInfo:
        """The handler registered as ``name``; an ``UnknownHandlerError`` lists the available names."""
        handlers = self.handlers()
        if name in handlers:
            return handlers[name]
        raise UnknownHandlerError(name, list(handlers), suggest(name, handlers))

    def info_for(self, cls: type[KwargsHandler]) -> HandlerInfo | None:
        """The registration of ``cls`` (or of the registered class it subclasses), if any."""
        for info in self.handlers().values():
            if info.cls is cls:
                return info
        for info in self.handlers().values():
            if issubclass(cls, info.cls):
                return info
        return None

    def incompatible(self) -> list[PluginRecord]:
        """The plugins left unloaded because their distribution excludes the running core."""
        return [r for r in self.plugins() if r.status == INCOMPATIBLE]

    def warn_incompatible(self, skip: Iterable[str] = (), stacklevel: int = 2) -> None:
        """Warn once per registry about each plugin a run goes without (:mod:`.plugin_warnings`).

        ``skip``: plugin or handler names the run leaves out anyway (disabled in its settings).
        """
        if self._warned_incompatible:
            return
        self._warned_incompatible = True
        warn_troubles(self.plugins(), skip, stacklevel + 1)

    @property
    def hook(self) -> Any:
        """The pluggy hook relay, to call the other hooks (``accelkw_state_ready``, …)."""
        self.load()
        self._resolve()
        return self.pm.hook

    def _resolve(self) -> dict[str, HandlerInfo]:
        if self._handlers is not None:
            return self._handlers
        handler_claims: dict[str, list[tuple[PluginRecord, type[Any]]]] = {}
        tracker_claims: dict[str, list[tuple[PluginRecord, type[Any]]]] = {}
        for rec in self._records.values():
            if rec.status == LOADED:
                for cls in rec.handlers:
                    handler_claims.setdefault(cls.name, []).append((rec, cls))
                for tcls in rec.trackers:
                    tracker_claims.setdefault(tcls.name, []).append((rec, tcls))
        handlers = self._claimed("handler", handler_claims)
        trackers = self._claimed("tracker", tracker_claims)
        # A plugin marked conflict by one name loses its other handlers and trackers too:
        # nothing half-loaded.
        self._handlers = {
            name: HandlerInfo(name, cls, rec.name, rec.distribution, rec.version)
            for name, (rec, cls) in handlers.items()
            if rec.status == LOADED
        }
        self._trackers = {
            name: TrackerInfo(name, cls, rec.name, rec.distribution, rec.version)
            for name, (rec, cls) in trackers.items()
            if rec.status == LOADED
        }
        return self._handlers

    def _claimed(
        self, kind: str, claims: dict[str, list[tuple[PluginRecord, type[Any]]]]
    ) -> dict[str, tuple[PluginRecord, type[Any]]]:
        """Each name claimed by one class; a name two classes claim fails every claimant."""
        out: dict[str, tuple[PluginRecord, type[Any]]] = {}
        for name, owners in sorted(claims.items()):
            if len({id(cls) for _, cls in owners}) > 1:
                # Sorted: the order entry points are found in is the file system's.
                who = " and ".join(
                    sorted(
                        f"{rec.distribution or 'code'} (plugin {rec.name!r}, "
                        f"class {cls.__qualname__})"
                        for rec, cls in owners
                    )
                )
                for rec, _ in owners:
                    rec.fail(
                        CONFLICT,
                        f"{kind.capitalize()}NameConflict",
                        f"{kind} name {name!r} is claimed by {who}",
                    )
                    if rec.plugin is not None and self.pm.is_registered(rec.plugin):
                        self.pm.unregister(rec.plugin)
                continue
            out[name] = owners[0]
        return out


def _names_in(value: str | None) -> set[str] | None:
    """The names of a comma-separated list variable; ``None`` when it is unset."""
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}
