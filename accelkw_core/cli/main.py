"""Entry point of the ``accelkw`` command: builds the parser from the command modules."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from accelkw_core._version import __version__
from accelkw_core.errors import AccelkwError

__all__ = ["build_parser", "main"]

# Each module has ``add_parser(subparsers)``, which sets ``func(args) -> int`` on its parser.
# Modules are imported when the parser is built, so they keep heavy imports inside functions.
COMMANDS = {
    "plugins": "accelkw_core.cli.plugins_cmd",
    "config": "accelkw_core.cli.config_cmd",
    "plan": "accelkw_core.cli.plan_cmd",
    "launch": "accelkw_core.cli.launch_cmd",
    "demo": "accelkw_core.cli.demo_cmd",
    "env": "accelkw_core.cli.env_cmd",
}
COMMAND_MODULES = tuple(COMMANDS.values())


def _requested(argv: Sequence[str] | None) -> str | None:
    """The command named in ``argv`` when it is a known one, else ``None`` (build them all)."""
    words = sys.argv[1:] if argv is None else argv
    first = next((w for w in words if not w.startswith("-")), None)
    return first if first in COMMANDS else None


def build_parser(argv: Sequence[str] | None = ()) -> argparse.ArgumentParser:
    """The ``accelkw`` parser; given ``argv`` naming a command, only that command's parser.

    Building one command's parser instead of all six keeps ``accelkw plugins list`` fast;
    ``accelkw --help``, an unknown command and the documentation still get every command.
    """
    parser = argparse.ArgumentParser(
        prog="accelkw",
        description="Configure PyTorch training runs from independently installable handler plugins.",
    )
    parser.add_argument("--version", action="version", version=f"accelkw-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = _requested(argv) if argv != () else None
    for name, module_name in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module_name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (user errors print one line, no traceback)."""
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    import warnings

    from accelkw_core.cli.strict import show_warning

    previous, warnings.showwarning = warnings.showwarning, show_warning
    try:
        import os

        # `logging` costs a listing ~6 ms: imported only when a level is asked for.
        if os.environ.get("ACCELKW_LOG_LEVEL", "").strip():
            from accelkw_core.log_setup import configure_from_env

            configure_from_env()
        return int(func(args))
    except AccelkwError as exc:
        # Several errors at once (ConfigErrors) are a line each.
        for line in str(exc).splitlines() or [""]:
            print(f"accelkw: error: {line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("accelkw: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
