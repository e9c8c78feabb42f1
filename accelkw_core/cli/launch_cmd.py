"""``accelkw launch``: run a training script on one or many machines through torchrun.

The engine is ``torch.distributed.run``; this command adds, before any worker starts, a check
of its own options, of the script and of the effective configuration (one line and exit 1 for
each fault, not a traceback per rank); the config, carried to every worker in
``ACCELKW_CONFIG``; ``accelerate launch``'s flags and its ``--config_file`` YAML, carried out as
Accelerate's launcher does (:func:`apply_accelerate_options`); for single-node runs, a
rendezvous on a port torchrun picks; ``OMP_NUM_THREADS=1`` when unset, as
torchrun would set it, without its banner; with ``--max-restarts``, a rendezvous whose restarted
workers can meet again; the first failed worker's exit status; and process
hygiene: signals forwarded, a Ctrl-C that stops everything within seconds, and workers that die
with the launch even when it is killed with SIGKILL (see :func:`run_child` and
:mod:`accelkw_core.cli.worker`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from accelkw_core.cli.accelerate_options import add_accelerate_options, given_values
from accelkw_core.cli.worker import CHECK_ENV, ERRORS_ENV, PARENT_ENV
from accelkw_core.errors import ConfigError

__all__ = [
    "INTERRUPT_GRACE_S",
    "add_launch_options",
    "add_parser",
    "apply_accelerate_options",
    "build_command",
    "check_launch_options",
    "cmd_launch",
    "restart_warning",
    "run_child",
]

WORKER = "accelkw_core.cli.worker"
# After a Ctrl-C is forwarded, how long the workers get to stop before everything is killed.
INTERRUPT_GRACE_S = 3.0
NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")
# torch's switch for a store of the workers' own, rather than the agent's (see build_command).
UNSHARED_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

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
    # Reached through Accelerate's flags (--rdzv_conf, --monitor_interval, --tee, ...).
    "rdzv_conf": "--rdzv-conf",
    "monitor_interval": "--monitor-interval",
    "tee": "--tee",
    "log_dir": "--log-dir",
    "role": "--role",
}
# The options that choose the rendezvous; with none given, launch picks one (see build_command).
RENDEZVOUS = ("rdzv_endpoint", "rdzv_backend", "rdzv_id", "master_addr", "master_port")


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
    parser.add_argument(
        "--max-restarts",
        "--max_restarts",
        metavar="N",
        help="when a worker fails, stop them all and start them again, up to N times "
        "(torchrun's elastic restart; each attempt sees TORCHELASTIC_RESTART_COUNT=0, 1, ...); "
        "the script resumes from its newest checkpoint",
    )
    parser.add_argument("--config", help="config file for every worker (sets ACCELKW_CONFIG)")


def add_parser(sub: Any) -> None:
    launch = sub.add_parser(
        "launch",
        help="run a training script on N processes (torchrun), carrying the config",
        description="Run SCRIPT through torch.distributed.run with the given processes per "
        "node; multi-node options pass through to torchrun. With one process and no other "
        "option the script runs directly. Exits with the first failed worker's status. "
        "With --max-restarts N a failed worker group is restarted up to N times. Before any "
        "worker starts, every error of the configuration and any extension-point conflict "
        "among the handlers the run would compose (in its mixed precision and world size) "
        "is refused, one line each.",
    )
    add_launch_options(launch)
    launch.add_argument(
        "-m", "--module", action="store_true", help="SCRIPT is a module name, as python -m"
    )
    add_accelerate_options(launch)
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
    child_env.update(apply_accelerate_options(args))
    check_launch_options(args)
    if args.config:
        from accelkw_core.config.files import find_config, load_config

        path = find_config(args.config)
        # Read here (a missing file or bad TOML fails at once); its values are checked with
        # everything else, every problem at once, before any worker starts (cmd_launch).
        load_config(path, collect=True)
        child_env[CONFIG_ENV] = str(path.resolve() if path else args.config)
    nproc = args.nproc_per_node or "1"
    given = {key: getattr(args, key) for key in PASSTHROUGH if getattr(args, key, None)}
    # Every worker starts through accelkw_core.cli.worker: it dies with its parent and reports
    # a configuration error as one line (printed by the agent, once, for torchrun's workers).
    target = ["--module", script] if module else [script]
    child_env.pop(ERRORS_ENV, None)
    child_env[PARENT_ENV] = str(os.getpid())  # the agent replaces it for torchrun's workers
    if nproc == "1" and not given:
        return [sys.executable, "-m", WORKER, *target, *script_args], child_env
    # torchrun sets OMP_NUM_THREADS=1 for several workers, with a banner saying so; set here,
    # the same value reaches the workers without the banner. A value the user set is kept.
    child_env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "accelkw_core.cli.torchrun", "--nproc-per-node", str(nproc)]
    single_node = given.get("nnodes") in (None, "1", "1:1") and "rdzv_endpoint" not in given
    restarts = _restarts(args)
    if restarts:
        # Each restarted worker group must meet in a store of its own: torchrun's workers
        # otherwise share the agent's store across attempts, and the new group reads the
        # addresses the killed one published there (gloo "Connection refused", NCCL the same;
        # pytorch/pytorch#135712). Not sharing it, rank 0 of each attempt hosts a fresh one.
        child_env.setdefault(UNSHARED_STORE_ENV, "1")
    if single_node and not given.keys() & {
        "rdzv_endpoint",
        "rdzv_backend",
        "rdzv_id",
        "master_port",
    }:
        # torchrun's fixed default port 29500 collides between concurrent runs on one machine:
        # a c10d rendezvous on port 0 lets the store take a free port when it starts (nothing
        # found free here and released, for another process to take first). Its store is also
        # one per attempt, which a restarting run needs (the static one keeps one for all).
        host = given.pop("master_addr", "127.0.0.1")
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:0", "--local-addr", host]
    for key, value in given.items():
        cmd += [PASSTHROUGH[key], str(value)]
    cmd += ["--module", WORKER, *target, *script_args]
    return cmd, child_env


def apply_accelerate_options(args: argparse.Namespace) -> dict[str, str]:
    """Carry out the Accelerate flags in ``args`` (and the ``--config_file`` they name).

    Sets the torchrun options they stand for on ``args`` and returns the variables the workers
    get, as ``accelerate launch`` would set them. An Accelerate flag and accelkw's own option
    for the same thing (``--num_processes 4`` with ``--nproc-per-node 2``) must agree.
    """
    from accelkw_core.config.accelerate_launch import translate

    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    path = getattr(args, "accelerate_config_file", None)
    if path:
        from accelkw_core.config.accelerate_yaml import read_accelerate_config

        read = read_accelerate_config(path)
        values.update(read.flags)
        sources.update(read.sources)
        for key, value in read.shared.items():
            if getattr(args, key, None) is None:
                setattr(args, key, str(value))
    given = given_values(args)
    given.pop("config_file", None)
    for name in given:
        sources.pop(name, None)  # the command line wins over the file, as in Accelerate
    values.update(given)
    if not values:
        return {}
    translation = translate(values, sources)
    for key, value in translation.torchrun.items():
        mine = getattr(args, key, None)
        if mine is not None and str(mine) != value:
            raise ConfigError(
                "launch",
                key,
                mine,
                f"{value!r}, as the Accelerate flags ask, or one of the two left out",
                source=f"option --{key.replace('_', '-')}",
            )
        setattr(args, key, value)
    return translation.env


def _restarts(args: argparse.Namespace) -> int:
    value = getattr(args, "max_restarts", None)
    return int(str(value).strip()) if value else 0


def restart_warning(args: argparse.Namespace) -> str | None:
    """Why ``--max-restarts`` cannot restart the workers with the rendezvous ``args`` chose.

    torchrun's static rendezvous (``--master-addr``/``--node-rank``, its default) serves every
    attempt from one store, so a restarted group finds the killed one's addresses there and
    fails to connect; a restarting run needs ``--rdzv-backend c10d``. ``None`` when fine.
    """
    if not _restarts(args):
        return None
    backend = getattr(args, "rdzv_backend", None)
    user_rendezvous = any(getattr(args, key, None) for key in RENDEZVOUS)
    multi_node = getattr(args, "nnodes", None) not in (None, "1", "1:1")
    if (user_rendezvous or multi_node) and backend in (None, "static"):
        return (
            "--max-restarts with the static rendezvous (--master-addr/--master-port/--node-rank): "
            "torchrun reuses one store for every attempt, so restarted workers fail to connect; "
            "use --rdzv-backend c10d --rdzv-endpoint HOST:PORT (on one machine, leave the "
            "rendezvous options out and accelkw launch picks it)"
        )
    return None


def _bad(option: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        "launch", option.lstrip("-").replace("-", "_"), value, expected, source=f"option {option}"
    )


def _int(text: str, option: str, low: int, high: int | None = None) -> int:
    expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    try:
        value = int(str(text).strip())
    except ValueError:
        raise _bad(option, text, expected) from None
    if value < low or (high is not None and value > high):
        raise _bad(option, text, expected)
    return value


def check_launch_options(args: argparse.Namespace) -> None:
    """Check the options torchrun would reject with a traceback; a ``ConfigError`` names each.

    The ranges are torchrun's: at least one process per node and one node, ports 1-65535, no
    negative restart count, a node rank below the node count.
    """
    nproc = args.nproc_per_node
    if nproc is not None and str(nproc) not in NPROC_WORDS:
        words = ", ".join(repr(w) for w in NPROC_WORDS)
        text = str(nproc).strip()
        if not text.isdigit() or int(text) < 1:
            raise _bad("--nproc-per-node", nproc, f"an integer >= 1, or one of {words}")
    nodes_max = None
    if getattr(args, "nnodes", None):
        parts = str(args.nnodes).split(":")
        if len(parts) > 2:
            raise _bad("--nnodes", args.nnodes, "an integer >= 1, or MIN:MAX")
        low, high = (_int(p, "--nnodes", 1) for p in (parts[0], parts[-1]))
        if low > high:
            raise _bad("--nnodes", args.nnodes, "MIN:MAX with MIN <= MAX")
        nodes_max = high
    if getattr(args, "node_rank", None):
        _int(args.node_rank, "--node-rank", 0, None if nodes_max is None else nodes_max - 1)
    if getattr(args, "master_port", None):
        _int(args.master_port, "--master-port", 1, 65535)
    if getattr(args, "max_restarts", None):
        _int(args.max_restarts, "--max-restarts", 0)
    endpoint = getattr(args, "rdzv_endpoint", None)
    if endpoint and ":" in endpoint and not endpoint.endswith("]"):  # "[::1]": no port
        host, _, port = str(endpoint).rpartition(":")
        if not host:
            raise _bad("--rdzv-endpoint", endpoint, "HOST or HOST:PORT")
        _int(port, "--rdzv-endpoint", 1, 65535)


def run_child(
    cmd: Sequence[str], env: Mapping[str, str], *, direct: bool = False, stdout: Any = None
) -> int:
    """Run ``cmd``, forwarding SIGINT/SIGTERM/SIGHUP to it; return its exit status (128+N).

    torchrun runs in its own process group, so a terminal's Ctrl-C reaches only this process,
    which forwards it once (torchrun given a second SIGINT mid-shutdown can leave workers
    behind). If the run has not stopped :data:`INTERRUPT_GRACE_S` seconds after a Ctrl-C, or at
    a second Ctrl-C, it is killed: a worker busy in C++ (a rendezvous, a collective) does not see
    a SIGINT, and torchrun would wait 30 s for it. SIGTERM and SIGHUP keep torchrun's own grace
    period, which schedulers count on for a checkpoint. The child dies with this process, even
    one killed with SIGKILL (Linux: ``PR_SET_PDEATHSIG``), and so do the workers
    (:mod:`accelkw_core.cli.worker`).

    A ``direct`` single-process run stays in the terminal's group so it can read the terminal
    (pdb, input()); there a Ctrl-C already reaches it, so SIGINT is forwarded only when stdin is
    not a terminal (a signal sent to this process alone). ``stdout``: where the child's
    standard output goes (a file object or descriptor; ``None``: this process's).
    """
    import signal
    import subprocess
    import threading
    import time

    from accelkw_core.cli.worker import die_with_parent

    launcher = os.getpid()

    def tie_to_launcher() -> None:  # runs in the child, between fork and exec
        die_with_parent(signal.SIGKILL, launcher)
        # A launch started in the background by a shell inherits SIGINT ignored, and Python
        # then installs no KeyboardInterrupt handler: the forwarded Ctrl-C would be lost.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    popen_kwargs: dict[str, Any] = {} if direct else {"process_group": 0}
    proc = subprocess.Popen(
        list(cmd), env=dict(env), stdout=stdout, preexec_fn=tie_to_launcher, **popen_kwargs
    )
    forwarded = [signal.SIGTERM]
    if hasattr(signal, "SIGHUP"):
        forwarded.append(signal.SIGHUP)
    terminal = direct and sys.stdin is not None and sys.stdin.isatty()
    if not terminal:
        forwarded.append(signal.SIGINT)
    previous: dict[int, Any] = {}
    kill_at: list[float] = []  # when a Ctrl-C's grace ends

    def kill() -> None:
        if proc.poll() is None:
            if direct:
                proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)

    def forward(signum: int, frame: Any) -> None:
        if proc.poll() is not None:
            return
        if signum == signal.SIGINT:
            if kill_at:  # a second Ctrl-C: stop now
                kill()
                return
            kill_at.append(time.monotonic() + INTERRUPT_GRACE_S)
        proc.send_signal(signum)

    if threading.current_thread() is threading.main_thread():
        for sig in forwarded:
            previous[sig] = signal.signal(sig, forward)
        if terminal:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if kill_at and time.monotonic() > kill_at[0]:
                    kill()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if kill_at:  # interrupted: the status of a Ctrl-C, however the run then ended
        return 128 + signal.SIGINT if code != 0 else 0
    return 128 - code if code < 0 else code


def cmd_launch(args: argparse.Namespace) -> int:
    script_args = list(args.script_args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    if not args.module and not os.path.isfile(args.script):
        what = "is a directory" if os.path.isdir(args.script) else "does not exist"
        raise ConfigError(
            "launch", "script", args.script, f"a Python file (this path {what})", source="SCRIPT"
        )
    cmd, env = build_command(args, args.script, script_args, module=args.module)
    # The effective configuration (file, ACCELKW_* variables, installed plugins) is checked
    # here, once, rather than failing in every worker.
    from accelkw_core.config.files import CONFIG_ENV
    from accelkw_core.config.settings import resolve_settings

    settings = resolve_settings(config=env.get(CONFIG_ENV) or None, env=env)
    direct = "accelkw_core.cli.torchrun" not in cmd
    if direct:
        refuse_conflicts(settings, planned_world_size(args))
    else:
        # Checked by accelkw_core.cli.torchrun before torchrun starts a worker: planning a
        # multi-process run imports torch, which that process imports anyway and this one not.
        env[CHECK_ENV] = str(planned_world_size(args))
    # Warned here once (resolve_settings): the workers need not repeat it, one per process.
    from accelkw_core.discovery.default_registry import get_registry
    from accelkw_core.discovery.plugin_warnings import WARNED_ENV, trouble_keys

    env[WARNED_ENV] = ",".join(trouble_keys(get_registry().plugins(), settings.disabled))
    warning = restart_warning(args)
    if warning:
        print(f"accelkw: warning: {warning}", file=sys.stderr)
    return run_child(cmd, env, direct=direct)


def planned_world_size(args: argparse.Namespace) -> int:
    """The world size to plan a launch for: processes per machine times machines (the least
    of an elastic ``MIN:MAX``); 2 stands for any count not given as a number."""
    per_node = str(args.nproc_per_node or "1")
    nodes = str(args.nnodes or "1").split(":", 1)[0]
    if not (per_node.isdigit() and nodes.isdigit()):
        return 2
    return max(1, int(per_node) * int(nodes))


def refuse_conflicts(settings: Any, world_size: int) -> None:
    """Raise before any worker starts when the installed handlers would conflict in the run.

    The same plans the workers carry out, planned on the launch's world size: two handlers
    contributing to an extension point that takes one would fail every worker, after torchrun
    started them all. The error names the run's precision and world size, and the precision
    that makes them conflict when it is not every one.
    """
    from accelkw_core.cli.plan_cmd import launch_conflicts
    from accelkw_core.discovery.default_registry import get_registry
    from accelkw_core.errors import ComposeError, raise_all

    found = launch_conflicts(settings, get_registry(), world_size)
    where = f"mixed_precision={settings.mixed_precision!r}, {world_size} process(es)"
    raise_all(
        [
            ComposeError(f"not starting the workers ({where}): {conflict.message}")
            for conflict in found
        ]
    )


def check_before_workers(env: Mapping[str, str]) -> None:
    """What :mod:`accelkw_core.cli.torchrun` runs before torchrun starts a worker, when
    ``accelkw launch`` asked (``ACCELKW_LAUNCH_CHECK``: the world size to plan for)."""
    from accelkw_core.config.files import CONFIG_ENV
    from accelkw_core.config.settings import resolve_settings

    settings = resolve_settings(config=env.get(CONFIG_ENV) or None, env=env)
    refuse_conflicts(settings, int(env[CHECK_ENV]))
