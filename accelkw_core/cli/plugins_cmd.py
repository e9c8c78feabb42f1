"""``accelkw plugins list|show|new``: what is installed, where it came from, whether it loaded;
and a new plugin to start from."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from accelkw_core.cli.render import jsonable, print_json, table

__all__ = ["add_parser", "handler_fields", "plugin_json"]

UNIMPORTED = ("disabled", "incompatible")  # statuses whose plugin module is never imported


def add_parser(sub: Any) -> None:
    plugins = sub.add_parser("plugins", help="list, inspect and create handler and tracker plugins")
    psub = plugins.add_subparsers(dest="plugins_command", metavar="ACTION", required=True)

    lst = psub.add_parser(
        "list", help="every installed plugin, handler and tracker, with its kind and status"
    )
    lst.add_argument("--json", action="store_true", help="print a JSON array of plugin objects")
    lst.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any plugin failed, conflicts or is incompatible with this core, "
        "ACCELKW_PLUGINS / ACCELKW_DISABLE_PLUGINS name a plugin that is not installed, or "
        "two installed handlers on by default would contribute to an extension point that "
        "takes one (planned in each mixed precision on 1 and 2 processes, saying when a "
        "conflict appears only under some; `accelkw plan` and `accelkw config check` check a "
        "run's own settings). A plain listing kept since marks the conflicting handlers' rows",
    )
    lst.add_argument(
        "--refresh",
        action="store_true",
        help="import every plugin now instead of answering from the listing kept when nothing "
        "was installed, removed or edited since",
    )
    lst.set_defaults(func=cmd_list)

    show = psub.add_parser(
        "show",
        help="a handler's fields, types, defaults and documentation (or a tracker's options)",
    )
    show.add_argument(
        "name", help="the handler's registry name, e.g. autocast, or a tracker's, e.g. mlflow"
    )
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_show)

    new = psub.add_parser(
        "new",
        help="create a plugin distribution: pyproject, handler (or tracker), hook, README, tests",
    )
    new.add_argument(
        "name",
        help="the handler's registry name (or the tracker's name): a lowercase identifier, "
        "e.g. seed",
    )
    new.add_argument(
        "--kind",
        choices=("handler", "tracker"),
        default="handler",
        help="what the plugin contributes: a kwargs handler (default) or a tracker for "
        "Accelerator(log_with=...)",
    )
    new.add_argument(
        "--dir",
        metavar="PATH",
        help="the folder to create (default: ./accelkw-NAME, with NAME's underscores as "
        "dashes: plugins new grad_clip creates ./accelkw-grad-clip); it must not exist or be "
        "empty",
    )
    new.add_argument(
        "--class-name",
        metavar="NAME",
        help="the handler class's name (default: NAME in CamelCase + Kwargs: plugins new "
        "grad_clip names it GradClipKwargs); a Python class name",
    )
    # The author's choice, required: installing a plugin must not change a run that did not
    # ask for it, so the template does not pick for them.
    # Required for a handler (cmd_new says so); a tracker has no such choice.
    when = new.add_mutually_exclusive_group()
    when.add_argument(
        "--opt-in",
        dest="opt_in",
        action="store_true",
        default=None,
        help="the handler is composed only when a run asks for it (opt_in = True); required "
        "for a handler that changes numbers or random state on its own (seeding, clipping, "
        "skipping steps, ...)",
    )
    when.add_argument(
        "--on-by-default",
        dest="opt_in",
        action="store_false",
        default=None,
        help="every run composes the installed handler with its defaults (opt_in = False); "
        "only for a handler that acts when the run asks for what it does (mixed precision, "
        "several processes, a profiler block)",
    )
    new.set_defaults(func=cmd_new, new_parser=new)


def handler_fields(cls: type) -> list[dict[str, Any]]:
    """The fields of a handler class as ``{"name", "type", "default", "doc"}`` dicts."""
    from accelkw_core.contract.validation import describe_type, field_specs

    return [
        {
            "name": spec.name,
            "type": describe_type(spec.type),
            "default": jsonable(spec.default),
            "doc": spec.doc,
        }
        for spec in field_specs(cls).values()
    ]


def plugin_json(record: Any, fields: bool = True) -> dict[str, Any]:
    """A plugin record as ``plugins list --json`` prints it; ``fields=False``: each handler's
    ``fields`` is ``None`` (resolving annotations costs a table listing ~0.5 ms per handler)."""
    handlers = []
    for cls in record.handlers:
        try:
            fields_of: list[dict[str, Any]] | None = handler_fields(cls) if fields else None
        except Exception as exc:  # an annotation that cannot be resolved still lists
            fields_of = [{"name": "?", "type": f"unresolvable: {exc}", "default": None, "doc": ""}]
        handlers.append(
            {"name": cls.name, "class": f"{cls.__module__}.{cls.__qualname__}", "fields": fields_of}
        )
    trackers = [
        {
            "name": tcls.name,
            "class": f"{tcls.__module__}.{tcls.__qualname__}",
            "requires_logging_directory": tcls.requires_logging_directory,
        }
        for tcls in record.trackers
    ]
    return {
        "name": record.name,
        "distribution": record.distribution,
        "version": record.version,
        "status": record.status,
        "error": record.error,
        "entry_point": record.entry_point,
        "load_ms": round(record.load_ms, 3),
        "kinds": record.kinds,
        "handlers": handlers,
        "trackers": trackers,
        "compat": _compat_json(record),
    }


def _compat_json(record: Any) -> dict[str, Any] | None:
    """What the distribution says of the core, next to the core that runs; ``None`` in code."""
    if record.distribution is None:
        return None
    from accelkw_core._version import __version__

    return {
        "core_range": record.core_range,
        "core_version": __version__,
        "fix": record.fix,
        "note": record.note,
    }


def cmd_list(args: argparse.Namespace) -> int:
    from accelkw_core.discovery import listing_cache
    from accelkw_core.discovery.default_registry import registry_exists

    # Only the process-wide registry built from entry points is cached: one set in code (tests,
    # notebooks through set_registry) is listed as it is.
    snap = None if registry_exists() else listing_cache.snapshot()
    listing = None
    if snap is not None and not args.refresh:
        listing = listing_cache.read(snap)
        if listing is not None and args.json and not listing["fields"]:
            listing = None  # kept by a table listing, which does not resolve fields
        kept = listing.get("conflicts") if listing is not None else None
        # None: kept by a listing without --strict, which planned nothing; strings: kept by
        # an older core, without the handlers of each conflict.
        planned = isinstance(kept, list) and all(isinstance(c, dict) for c in kept)
        if args.strict and not planned:
            listing = None
        if listing is not None:
            for message in listing["typos"]:  # as config_warnings prints them after a load
                print(f"accelkw: warning: {message}", file=sys.stderr)
    if listing is None:
        listing = _load_listing(snap, fields=args.json or args.refresh, strict=args.strict)
    return _print_listing(args, listing)


def _load_listing(snap: Any, fields: bool, strict: bool = False) -> dict[str, Any]:
    """Load every plugin for real; keep what the listing shows under ``snap`` (if any).

    ``fields``: resolve each handler's fields (``--json`` prints them; a table does not).
    ``strict``: also plan the installed handlers on by default and keep their point conflicts
    (a function of what is installed, so kept with the listing).
    """
    from accelkw_core.cli.strict import config_warnings
    from accelkw_core.discovery import listing_cache
    from accelkw_core.discovery.default_registry import get_registry

    registry = get_registry()
    before = set(sys.modules)
    with config_warnings() as typos:  # ACCELKW_PLUGINS / ACCELKW_DISABLE_PLUGINS naming no plugin
        records = registry.plugins()
    imported = set(sys.modules) - before
    listing = {
        "plugins": [plugin_json(r, fields) for r in records],
        "typos": typos,
        "autoload": registry.autoload,
        "fields": fields,
    }
    if strict:  # after `imported`: planning imports torch, which is no plugin's source
        from accelkw_core.cli.plan_cmd import default_conflict_runs

        listing["conflicts"] = [
            {"message": c.message, "handlers": c.handlers, "condition": c.condition}
            for c in default_conflict_runs(registry)
        ]
    if snap is not None and registry.group == listing_cache.GROUP:
        # A plugin left unimported (denied, or built for another core) stays so until the stamp
        # changes, wherever its module is: only the imported ones' sources matter.
        tried = [r.entry_point or "" for r in records if r.status not in UNIMPORTED]
        files = listing_cache.module_files(imported, tried)
        if files is not None and all(r.entry_point for r in records):
            listing_cache.write(snap, listing, files)
    return listing


def _print_listing(args: argparse.Namespace, listing: dict[str, Any]) -> int:
    plugins: list[dict[str, Any]] = listing["plugins"]
    bad = [p for p in plugins if p["status"] in ("failed", "conflict", "incompatible")]
    # Point conflicts are planned by --strict (planning imports torch, which a listing does
    # not); a listing kept since marks the rows of the handlers that clash.
    conflicts = [c for c in listing.get("conflicts", ()) if isinstance(c, dict)]
    clashing: dict[str, list[str]] = {}
    for conflict in conflicts:
        for name in conflict["handlers"]:
            others = [n for n in conflict["handlers"] if n != name]
            text = "point conflict with " + ", ".join(repr(n) for n in others)
            if conflict["condition"]:
                text += f" ({conflict['condition']})"
            clashing.setdefault(name, []).append(text)
    if args.json:
        print_json(plugins)
    else:
        rows = []
        for p in plugins:
            reason = p["error"]["message"] if p["error"] else ""
            common = [p["name"], p["distribution"] or "(code)", p["version"] or "-", p["status"]]
            contributed = [("handler", h) for h in p["handlers"]]
            contributed += [("tracker", t) for t in p.get("trackers", ())]
            if contributed and p["status"] != "failed":
                for kind, c in sorted(contributed, key=lambda kc: (kc[0], str(kc[1]["name"]))):
                    row = [kind, c["name"], c["class"].rsplit(".", 1)[-1], *common, reason]
                    marks = clashing.get(str(c["name"])) if kind == "handler" else None
                    if marks:
                        row[6] = f"{row[6]}, conflict"
                        row[7] = "; ".join(filter(None, [reason, *marks]))
                    rows.append(row)
            else:
                rows.append(["-", "-", "-", *common, reason])
        # Handlers, then trackers, then plugins that contribute nothing (failed, disabled, ...).
        rows.sort(key=lambda row: (row[0] == "-", row[0], row[1], row[3]))
        headers = [
            "KIND",
            "NAME",
            "CLASS",
            "PLUGIN",
            "DISTRIBUTION",
            "VERSION",
            "STATUS",
            "REASON",
        ]
        if rows:
            print(table(headers, rows))
        elif not listing["autoload"]:
            print("no plugins registered in code")
        else:
            print("no accelkw plugins installed (pip install accelkw-autocast, ...)")
        if not listing["autoload"]:
            print(
                "entry-point autoloading is off (ACCELKW_DISABLE_PLUGIN_AUTOLOAD): "
                "installed plugins are not read"
            )
    for p in bad:
        reason = p["error"]["message"] if p["error"] else ""
        print(f"accelkw: warning: plugin {p['name']!r} {p['status']}: {reason}", file=sys.stderr)
    if not args.strict:
        conflicts = []
    for conflict in conflicts:
        print(f"accelkw: error: {conflict['message']}", file=sys.stderr)
    return 1 if args.strict and (bad or listing["typos"] or conflicts) else 0


def cmd_show(args: argparse.Namespace) -> int:
    import inspect

    from accelkw_core.discovery.default_registry import get_registry
    from accelkw_core.errors import PluginError, UnknownHandlerError

    registry = get_registry()
    tracker = registry.trackers().get(args.name)
    if tracker is not None and args.name not in registry.handlers():
        return _show_tracker(args, tracker)
    try:
        info = registry.get(args.name)
    except UnknownHandlerError:
        # Not imported, so its handlers are unknown: the plugin's own name is all there is.
        for stale in registry.incompatible():
            if stale.name == args.name:
                raise PluginError(stale.name, stale.distribution, stale.reason) from None
        raise
    record = next((r for r in registry.plugins() if r.name == info.plugin), None)
    note = record.note if record is not None else None
    cls = info.cls
    fields = handler_fields(cls)
    data: dict[str, Any] = {
        "name": info.name,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "plugin": info.plugin,
        "distribution": info.distribution,
        "version": info.version,
        "after": list(cls.after),
        "doc": inspect.cleandoc(cls.__doc__ or ""),
        "fields": fields,
        "core_range": record.core_range if record is not None else None,
        "note": note,
    }
    if args.json:
        print_json(data)
        return 0
    print(f"{info.name}: {data['class']}")
    print(
        f"  provided by plugin {info.plugin!r} from {info.distribution or '(code)'} {info.version or ''}".rstrip()
    )
    if cls.after:
        print(f"  applied after: {', '.join(cls.after)}")
    if record is not None and record.core_range:
        print(f"  built for accelkw-core{record.core_range}")
    if note:
        print(f"  note: {note}")
    if data["doc"]:
        print()
        for line in str(data["doc"]).splitlines():
            print(f"  {line}".rstrip())  # indentation kept: examples stay readable
    print()
    rows = [[f["name"], f["type"], repr(f["default"]), f["doc"]] for f in fields]
    print(table(["FIELD", "TYPE", "DEFAULT", "DOC"], rows))
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from accelkw_core.tools.scaffold import PluginNames, scaffold_plugin

    if args.kind == "handler" and args.opt_in is None:
        # argparse's own wording and exit status, as when the group was required outright.
        args.new_parser.error(
            "one of the arguments --opt-in --on-by-default is required for a handler: --opt-in "
            "when it changes numbers or random state on its own, --on-by-default otherwise"
        )
    names = PluginNames.from_name(args.name, args.class_name, args.kind)
    files = scaffold_plugin(
        args.name, args.dir, opt_in=args.opt_in, class_name=args.class_name, kind=args.kind
    )
    root = Path(args.dir) if args.dir is not None else Path.cwd() / names.distribution
    shown = os.path.relpath(root) if not os.path.relpath(root).startswith("..") else str(root)
    print(
        f"created plugin {names.name!r} (distribution {names.distribution}, "
        f"{args.kind} {names.class_name}"
        + (f", {'opt-in' if args.opt_in else 'on by default'}" if args.kind == "handler" else "")
        + f") in {shown}:"
    )
    for path in files:
        print(f"  {path.relative_to(root).as_posix()}")
    print("next:")
    # pytest too: the tests the scaffold wrote need it, and accelkw's requirements have none.
    print(f"  pip install -e {shown} pytest")
    print(f"  pytest {os.path.join(shown, 'tests')}")
    if args.kind == "handler":
        print(f"  accelkw plugins show {names.name}")
    else:
        print("  accelkw plugins list")
    return 0


def _show_tracker(args: argparse.Namespace, info: Any) -> int:
    """``plugins show`` for a tracker: its class, distribution and constructor options."""
    import inspect

    cls = info.cls
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    options = [
        {"name": p.name, "default": None if p.default is p.empty else jsonable(p.default)}
        for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    data: dict[str, Any] = {
        "name": info.name,
        "kind": "tracker",
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "plugin": info.plugin,
        "distribution": info.distribution,
        "version": info.version,
        "requires_logging_directory": cls.requires_logging_directory,
        "accepts_logging_directory": cls.accepts_logging_directory,
        "main_process_only": cls.main_process_only,
        "doc": inspect.cleandoc(cls.__doc__ or ""),
        "options": options,
    }
    if args.json:
        print_json(data)
        return 0
    print(f"{info.name}: {data['class']} (tracker)")
    source = f"{info.distribution or '(code)'} {info.version or ''}".rstrip()
    print(f"  provided by plugin {info.plugin!r} from {source}")
    if cls.requires_logging_directory:
        print("  writes under the logging folder (project_dir= or ProjectConfiguration)")
    elif cls.accepts_logging_directory:
        print("  writes under the logging folder when the run has one")
    if data["doc"]:
        print()
        for line in str(data["doc"]).splitlines():
            print(f"  {line}".rstrip())
    print()
    rows = [[str(o["name"]), "-" if o["default"] is None else repr(o["default"])] for o in options]
    print(table(["OPTION", "DEFAULT"], rows))
    return 0
