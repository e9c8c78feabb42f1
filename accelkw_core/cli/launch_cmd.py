"""``accelkw launch``: run a training script on one or many machines through torchrun.

The engine is ``torch.distributed.run``; this command adds the config (carried to every worker
in ``ACCELKW_CONFIG``), a free local port for single-node runs, the first failed worker's exit
status, and forwarding of SIGINT/SIGTERM/SIGHUP so no worker outlives an interrupted launch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["add_launch_options", "add_parser", "build_command", "cmd_launch", "run_child"]

# Our option -> torchrun's option; each is passed through unchanged when given.
PASSTHROUGH = {
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "rdzv_endpoint": "--rdzv-endpoint",
    "rdzv_backend": "--rdzv-backend",
    "rdzv_id": "--rdzv-id",
    "master_addr": "--master-addr",
    "master_port": "--master-port",
    "max_restarts": "--max-restarts",
}


def add_launch_options(parser: argparse.ArgumentParser) -> None:
    """The options ``launch`` shares with ``demo``: process counts, rendezvous and config."""
    parser.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        default=None,
        help="processes per machine: a number, or torchrun's 'auto', 'cpu', 'gpu'",
    )
    parser.add_argument("--nnodes", help="machines, or MIN:MAX for elastic runs (torchrun)")
    parser.add_argument("--node-rank", "--node_rank", help="this machine's rank (torchrun)")
    parser.add_argument("--rdzv-endpoint", "--rdzv_endpoint", help="HOST:PORT of the rendezvous")
    parser.add_argument("--rdzv-backend", "--rdzv_backend", help="rendezvous backend (torchrun)")
    parser.add_argument("--rdzv-id", "--rdzv_id", help="rendezvous (job) id (torchrun)")
    parser.add_argument("--master-addr", "--master_addr", help="address of rank 0 (torchrun)")
    parser.add_argument("--master-port", "--master_port", help="port of rank 0 (torchrun)")
    parser.add_argument("--max-restarts", "--max_restarts", help="worker group restarts")
    parser.add_argument("--config", help="config file for every worker (sets ACCELKW_CONFIG)")


def add_parser(sub: Any) -> None:
    launch = sub.add_parser(
        "launch",
        help="run a training script on N processes (torchrun), carrying the config",
        description="Run SCRIPT through torch.distributed.run with the given processes per "
        "node; multi-node options pass through to torchrun. With one process and no other "
        "option the script runs directly. Exits with the first failed worker's status.",
    )
    add_launch_options(launch)
    launch.add_argument(
        "-m", "--module", action="store_true", help="SCRIPT is a module name, as python -m"
    )
    launch.add_argument("script", help="the training script (or module with -m)")
    launch.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    launch.set_defaults(func=cmd_launch)


def build_command(
    args: argparse.Namespace,
    script: str,
    script_args: Sequence[str],
    *,
    module: bool = False,
    env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``script`` as ``args`` ask."""
    from accelkw_core.config.files import CONFIG_ENV

    child_env = dict(os.environ if env is None else env)
    if args.config:
        from accelkw_core.config.files import find_config, load_config

        path = find_config(args.config)
        load_config(path)  # fail here, once, rather than in every worker
        child_env[CONFIG_ENV] = str(path.resolve() if path else args.config)
    nproc = args.nproc_per_node or "1"
    given = {key: getattr(args, key) for key in PASSTHROUGH if getattr(args, key, None)}
    target = ["-m", script] if module else [script]
    if nproc == "1" and not given:
        return [sys.executable, *target, *script_args], child_env
    cmd = [sys.executable, "-m", "accelkw_core.cli.torchrun", "--nproc-per-node", str(nproc)]
    single_node = given.get("nnodes") in (None, "1", "1:1") and "rdzv_endpoint" not in given
    if single_node and "master_port" not in given:
        # torchrun's fixed default port 29500 collides between concurrent runs on one machine.
        given.setdefault("master_addr", "127.0.0.1")
        given["master_port"] = str(_free_port())
    for key, value in given.items():
        cmd += [PASSTHROUGH[key], str(value)]
    if module:
        cmd.append("--module")
    cmd += [script, *script_args]
    return cmd, child_env


def run_child(cmd: Sequence[str], env: Mapping[str, str], *, direct: bool = False) -> int:
    """Run ``cmd``, forwarding SIGINT/SIGTERM/SIGHUP to it; return its exit status (128+N).

    torchrun runs in its own process group, so a terminal's Ctrl-C reaches only this process,
    which forwards it once (torchrun given a second SIGINT mid-shutdown can leave workers
    behind). A ``direct`` single-process run stays in the terminal's group so it can read the
    terminal (pdb, input()); there a Ctrl-C already reaches it, so SIGINT is forwarded only
    when stdin is not a terminal (a signal sent to this process alone).
    """
    import signal
    import subprocess
    import threading

    popen_kwargs: dict[str, Any] = {} if direct else {"process_group": 0}
    proc = subprocess.Popen(list(cmd), env=dict(env), **popen_kwargs)
    forwarded = [signal.SIGTERM]
    if hasattr(signal, "SIGHUP"):
        forwarded.append(signal.SIGHUP)
    terminal = direct and sys.stdin is not None and sys.stdin.isatty()
    if not terminal:
        forwarded.append(signal.SIGINT)
    previous: dict[int, Any] = {}

    def forward(signum: int, frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    if threading.current_thread() is threading.main_thread():
        for sig in forwarded:
            previous[sig] = signal.signal(sig, forward)
        if terminal:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cmd_launch(args: argparse.Namespace) -> int:
    script_args = list(args.script_args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    cmd, env = build_command(args, args.script, script_args, module=args.module)
    return run_child(cmd, env, direct="accelkw_core.cli.torchrun" not in cmd)
