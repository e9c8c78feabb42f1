"""``accelerate launch``'s flags registered on ``accelkw launch`` (their meaning: :mod:`accelkw_core.config.accelerate_launch`)."""

from __future__ import annotations

import argparse
from typing import Any

from accelkw_core.config.accelerate_launch import APPEND, FLAGS, SWITCH

__all__ = ["DEST_PREFIX", "SHARED", "add_accelerate_options", "given_values"]

# accelkw launch's own options that are also Accelerate's flags, with the same meaning.
SHARED = ("max_restarts", "rdzv_backend", "module")
_SHORT = {"quiet": "-q", "tee": "-t"}
DEST_PREFIX = "accelerate_"
# The flags --help shows; the rest are listed, with what becomes of each, in docs/migrating.md.
SHOWN = (
    "config_file",
    "num_processes",
    "num_machines",
    "machine_rank",
    "main_process_ip",
    "main_process_port",
    "mixed_precision",
    "cpu",
    "multi_gpu",
    "use_fsdp",
)


def add_accelerate_options(parser: argparse.ArgumentParser) -> None:
    """Register every flag of :data:`FLAGS` on ``parser`` (dest ``accelerate_<name>``)."""
    group = parser.add_argument_group(
        "accelerate launch's flags",
        "Accelerate's launcher flags, each honoured as Accelerate means it or refused with the "
        "reason (docs/migrating.md lists them)",
    )
    for name, flag in FLAGS.items():
        names = [f"--{name}", *([_SHORT[name]] if name in _SHORT else [])]
        dest = DEST_PREFIX + name
        shown = flag.what if name in SHOWN else argparse.SUPPRESS
        if flag.takes == SWITCH:
            group.add_argument(
                *names, dest=dest, action="store_const", const=True, default=None, help=shown
            )
        elif flag.takes == APPEND:
            group.add_argument(*names, dest=dest, action="append", default=None, help=shown)
        else:
            group.add_argument(*names, dest=dest, default=None, metavar="VALUE", help=shown)


def given_values(args: argparse.Namespace) -> dict[str, Any]:
    """The Accelerate flags given on the command line, by name."""
    out = {}
    for name in FLAGS:
        value = getattr(args, DEST_PREFIX + name, None)
        if value is not None:
            out[name] = value
    return out
