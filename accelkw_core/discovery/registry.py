"""Discovery and loading of handler plugins: entry points in, a pluggy manager and a status each.

A plugin is a module (or any object) with ``accelkw_*`` hook implementations, found through the
``accelkw`` entry-point group or registered in code. Loading is isolated: a plugin that fails in
any way is recorded with its reason and skipped; the rest keep working.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pluggy

from accelkw_core.config.environment import env_flag
from accelkw_core.discovery import cache, compat, hookspecs
from accelkw_core.discovery.records import (
    CONFLICT,
    DISABLED,
    FAILED,
    INCOMPATIBLE,
    LOADED,
    HandlerInfo,
    PluginRecord,
    _exc_text,
    _norm,
    _split_env,
    check_handler_class,
)
from accelkw_core.errors import (
    ConfigWarning,
    PluginError,
    UnknownHandlerError,
    suggest,
)
from accelkw_core.handlers.base import KwargsHandler

__all__ = [
    "ENTRY_POINT_GROUP",
    "HandlerInfo",
    "PluginRecord",
    "Registry",
    "get_registry",
    "set_registry",
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
    points; :meth:`register_plugin` adds plugin objects in code either way. Entry points come
    through the cache in ``cache_dir`` (``None`` with ``ACCELKW_NO_CACHE=1``; see
    :mod:`accelkw_core.discovery.cache`).
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
        self.allow = set(allow) if allow is not None else _split_env(env.get(ENV_ALLOW))
        self.deny = set(deny) if deny is not None else (_split_env(env.get(ENV_DENY)) or set())
        self._list_names = {
            "allow": ENV_ALLOW if allow is None else "the allow-list",
            "deny": ENV_DENY if deny is None else "the deny-list",
        }
        self.group = group
        self.cache_dir = cache.cache_dir(env)
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._staging: pluggy.PluginManager | None = None
        self._records: dict[str, PluginRecord] = {}
        self._handlers: dict[str, HandlerInfo] | None = None
        self._loaded = False
        self._warned_incompatible = False

    # -- loading -------------------------------------------------------------------------------

    def load(self, *, stamp: list[Any] | None = None) -> Registry:
        """Discover and load entry-point plugins, once; later calls do nothing.

        ``stamp``: the entry-point cache's stamp of this group, taken by the caller just before.
        """
        if self._loaded:
            return self
        self._loaded = True
        if self.autoload:
            found = cache.entry_points(self.group, self.cache_dir, stamp)
            self._warn_unknown_names(found)
            for ep in found:
                self._load_entry_point(ep)
        self._handlers = None
        return self

    def unknown_names(
        self, found: Iterable[cache.EntryPointInfo] | None = None
    ) -> list[tuple[str, str, str | None]]:
        """``(list, name, close match)`` for each allow/deny name no installed plugin has.

        A name matches a plugin's entry-point name or its distribution's name (``-``/``_``
        and case aside), as :meth:`load` applies them.
        """
        if found is None:
            found = cache.entry_points(self.group, self.cache_dir) if self.autoload else []
        known: dict[str, str] = {}
        for ep in found:
            for name in (ep.name, ep.distribution):
                if name:
                    known.setdefault(_norm(name), name)
        out = []
        for key, names in (("allow", self.allow or set()), ("deny", self.deny)):
            for name in sorted(names):
                if _norm(name) not in known:
                    hint = suggest(_norm(name), known)
                    out.append((self._list_names[key], name, known[hint] if hint else None))
        return out

    def _warn_unknown_names(self, found: list[cache.EntryPointInfo]) -> None:
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
        names = {name, _norm(name)} | ({dist, _norm(dist)} if dist else set())
        if self.allow is not None and not names & (self.allow | {_norm(a) for a in self.allow}):
            return f"not in the allow-list {ENV_ALLOW}={','.join(sorted(self.allow))}"
        if names & (self.deny | {_norm(d) for d in self.deny}):
            return f"in the deny-list {ENV_DENY}"
        return None

    def _load_entry_point(self, ep: cache.EntryPointInfo) -> None:
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
            record.fail(FAILED, type(exc).__name__, _exc_text(exc))
            return
        record.load_ms = (time.perf_counter() - start) * 1000
        self._activate(record, plugin)

    def _check_core(self, record: PluginRecord, ep: cache.EntryPointInfo) -> bool:
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
        try:
            self.pm.register(
                plugin,
                name=record.name
                if self.pm.get_plugin(record.name) is None
                else f"{record.name}@{id(plugin)}",
            )
        except Exception as exc:
            record.fail(FAILED, type(exc).__name__, _exc_text(exc))
            return
        record.plugin = plugin
        # Only a hook without a spec can be unknown, so look at those alone: pm.get_hookcallers
        # walks every plugin's implementations, which made loading n plugins quadratic.
        unknown = [
            caller.name
            for caller in vars(self.pm.hook).values()
            if not caller.has_spec() and any(i.plugin is plugin for i in caller.get_hookimpls())
        ]
        if unknown:
            self._reject(record, "UnknownHook", f"implements unknown hook(s): {', '.join(unknown)}")
            return
        classes: list[type[KwargsHandler]] = []

        def register(cls: type[KwargsHandler]) -> None:
            reason = check_handler_class(cls)
            if reason is not None:
                raise PluginError(record.name, record.distribution, reason)
            if cls not in classes:
                classes.append(cls)

        try:
            self._register_handlers_of(plugin, register)
        except PluginError as exc:
            self._reject(record, "InvalidHandler", exc.reason)
            return
        except Exception as exc:
            self._reject(
                record, type(exc).__name__, f"accelkw_register_handlers raised: {_exc_text(exc)}"
            )
            return
        record.handlers = classes

    def _register_handlers_of(self, plugin: object, register: Callable[[Any], None]) -> None:
        # Only this plugin's implementation is called. It is the one the main manager holds,
        # called as pluggy calls it (each parameter by name); a wrapper implementation goes
        # through pluggy, on a staging manager that holds only this plugin: a subset caller of
        # the main manager would filter every other plugin's implementations, quadratic in the
        # plugin count, and registering each plugin twice cost a third of loading it.
        if not hasattr(plugin, "accelkw_register_handlers"):
            return
        caller = getattr(self.pm.hook, "accelkw_register_handlers", None)
        impls = caller.get_hookimpls() if self.pm.is_registered(plugin) and caller else []
        impl = next((i for i in reversed(impls) if i.plugin is plugin), None)
        if impl is not None and not (impl.wrapper or impl.hookwrapper):
            arguments = {"register": register}
            impl.function(*[arguments[name] for name in impl.argnames])
            return
        staging = self._staging
        if staging is None:
            staging = self._staging = pluggy.PluginManager(hookspecs.PROJECT)
            staging.add_hookspecs(hookspecs)
        staging.register(plugin)
        try:
            staging.hook.accelkw_register_handlers(register=register)
        finally:
            staging.unregister(plugin)

    def _reject(self, record: PluginRecord, kind: str, message: str) -> None:
        record.fail(FAILED, kind, message)
        if record.plugin is not None:
            self.pm.unregister(record.plugin)
            record.plugin = None

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
        """Warn once per registry about each plugin a run goes without (see :mod:`.troubles`).

        ``skip``: plugin or handler names the run leaves out anyway (disabled in its settings).
        """
        if self._warned_incompatible:
            return
        self._warned_incompatible = True
        from accelkw_core.discovery.troubles import warn_troubles

        warn_troubles(self, skip, stacklevel + 1)

    @property
    def hook(self) -> Any:
        """The pluggy hook relay, to call the other hooks (``accelkw_state_ready``, …)."""
        self.load()
        self._resolve()
        return self.pm.hook

    def _resolve(self) -> dict[str, HandlerInfo]:
        if self._handlers is not None:
            return self._handlers
        claims: dict[str, list[tuple[PluginRecord, type[KwargsHandler]]]] = {}
        for rec in self._records.values():
            if rec.status == LOADED:
                for cls in rec.handlers:
                    claims.setdefault(cls.name, []).append((rec, cls))
        handlers: dict[str, HandlerInfo] = {}
        owner: dict[str, PluginRecord] = {}
        for hname, owners in sorted(claims.items()):
            if len({id(cls) for _, cls in owners}) > 1:
                who = " and ".join(
                    f"{rec.distribution or 'code'} (plugin {rec.name!r}, class {cls.__qualname__})"
                    for rec, cls in owners
                )
                for rec, _ in owners:
                    rec.fail(
                        CONFLICT,
                        "HandlerNameConflict",
                        f"handler name {hname!r} is claimed by {who}",
                    )
                    if rec.plugin is not None and self.pm.is_registered(rec.plugin):
                        self.pm.unregister(rec.plugin)
                continue
            rec, cls = owners[0]
            handlers[hname] = HandlerInfo(hname, cls, rec.name, rec.distribution, rec.version)
            owner[hname] = rec
        # A plugin marked conflict by one name loses its other handlers too: nothing half-loaded.
        handlers = {n: i for n, i in handlers.items() if owner[n].status == LOADED}
        self._handlers = handlers
        return handlers


_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, created (not loaded) on first use."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def set_registry(registry: Registry | None) -> Callable[[], None]:
    """Replace the process-wide registry (``None`` resets it); returns an undo function."""
    global _default
    previous = _default
    _default = registry

    def restore() -> None:
        global _default
        _default = previous

    return restore
