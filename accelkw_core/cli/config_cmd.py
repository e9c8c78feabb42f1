"""``accelkw config check [FILE]``: validate a config and print the effective settings.
``accelkw config import PATH``: an ``accelerate config`` YAML as accelkw's TOML."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "cmd_check", "cmd_import"]


def add_parser(sub: Any) -> None:
    config = sub.add_parser("config", help="check configuration files")
    csub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = csub.add_parser(
        "check",
        help="validate a config (and ACCELKW_* variables); print the effective settings",
        description="Validate FILE (default: ACCELKW_CONFIG, ./accelkw.toml, or "
        "./pyproject.toml [tool.accelkw]) together with the ACCELKW_* environment variables, "
        "and print the settings a run would use. Fields marked * differ from their default. "
        "Exit status 1 when anything is wrong.",
    )
    check.add_argument("file", nargs="?", help="the config file to check")
    check.add_argument("--json", action="store_true", help="print JSON")
    check.add_argument(
        "--strict",
        action="store_true",
        help="also exit 1 on warnings: an ACCELKW_* variable that nothing reads, a plugin "
        "allow/deny list naming a plugin that is not installed",
    )
    check.set_defaults(func=cmd_check)
    imp = csub.add_parser(
        "import",
        help="convert the YAML `accelerate config` wrote into accelkw's TOML",
        description="Read PATH (the YAML or JSON `accelerate config` writes) as `accelerate "
        "launch --config_file` reads it and print accelkw's TOML for it (or write it with "
        "--output), saying where each key went: [accelerator], a [handlers.NAME] table of an "
        "installed handler, the accelkw launch options that carry the process layout, or "
        "refused with the reason. Exit status 1 when a key is refused.",
    )
    imp.add_argument("path", help="the accelerate config file")
    imp.add_argument("-o", "--output", help="write the TOML here (refuses an existing file)")
    imp.set_defaults(func=cmd_import)


def cmd_check(args: argparse.Namespace) -> int:
    from accelkw_core.cli.plan_cmd import conflict_json, planned_conflicts
    from accelkw_core.cli.render import print_json
    from accelkw_core.cli.settings_view import accelerator_lines, handler_lines, settings_json
    from accelkw_core.cli.strict import config_warnings
    from accelkw_core.config.settings import resolve_settings
    from accelkw_core.discovery.default_registry import get_registry
    from accelkw_core.errors import AccelkwError

    registry = get_registry()
    try:
        with config_warnings() as warned:
            settings = resolve_settings(config=args.file, registry=registry, collect_errors=True)
    except AccelkwError as exc:
        if args.json:
            print_json({"ok": False, "errors": [str(exc)]})
        else:
            print(f"accelkw: error: {exc}", file=sys.stderr)
        return 1
    versions = {name: info.version for name, info in registry.handlers().items()}
    # What the run would meet when its handlers contribute (two to a point that takes one).
    conflicts = planned_conflicts(settings, registry)
    settings.errors.extend(conflicts)
    ok = not settings.errors and not (args.strict and warned)
    if args.json:
        data = settings_json(settings, versions)
        data["conflicts"] = [conflict_json(c) for c in conflicts]
        print_json({"ok": ok, "warnings": warned, **data})
        return 0 if ok else 1
    print(f"config: {settings.config.label}")
    print("accelerator:")
    for line in accelerator_lines(settings):
        print(line)
    print("handlers, in apply order:" if settings.handlers else "handlers: none installed")
    for i, hs in enumerate(settings.handlers, 1):
        for line in handler_lines(hs, i, versions.get(hs.name)):
            print(f"  {line}")
    for name, reason in settings.disabled.items():
        print(f"disabled: {name} ({reason})")
    for note in settings.notes:
        print(f"note: {note}")
    for err in settings.errors:
        print(f"accelkw: error: {err}", file=sys.stderr)
    counts = f"{len(settings.errors)} error(s)" + (f", {len(warned)} warning(s)" if warned else "")
    strict = " (--strict: warnings count as errors)" if args.strict and warned else ""
    print(f"{'ok' if ok else 'invalid'}: {counts}{strict}")
    return 0 if ok else 1


def cmd_import(args: argparse.Namespace) -> int:
    import tomli_w

    from accelkw_core.config.accelerate_import import import_accelerate_config

    imported = import_accelerate_config(args.path)
    text = tomli_w.dumps(imported.toml)
    report = sys.stderr if not args.output else sys.stdout
    for line in imported.mapped:
        print(f"mapped: {line}", file=report)
    if imported.launch:
        print(f"launch with: accelkw launch {' '.join(imported.launch)} SCRIPT", file=report)
    for line in imported.unused:
        print(f"unused: {line}", file=report)
    for err in imported.refused:
        print(f"refused: {err}", file=report)
    if args.output:
        try:
            with open(args.output, "x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            print(f"accelkw: error: {args.output} exists; choose another path", file=sys.stderr)
            return 1
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 1 if imported.refused else 0
