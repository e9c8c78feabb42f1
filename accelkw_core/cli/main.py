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
COMMAND_MODULES = (
    "accelkw_core.cli.plugins_cmd",
    "accelkw_core.cli.config_cmd",
    "accelkw_core.cli.plan_cmd",
    "accelkw_core.cli.launch_cmd",
    "accelkw_core.cli.demo_cmd",
    "accelkw_core.cli.env_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelkw",
        description="Configure PyTorch training runs from independently installable handler plugins.",
    )
    parser.add_argument("--version", action="version", version=f"accelkw-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (user errors print one line, no traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args))
    except AccelkwError as exc:
        print(f"accelkw: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("accelkw: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
