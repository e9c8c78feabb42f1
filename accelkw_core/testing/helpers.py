"""Helpers for testing handlers and plugins: isolated registries, states, real multi-process runs.

Nothing here mocks torch: :func:`run_workers` starts real processes that form a real
``torch.distributed`` group (gloo over loopback) when the target asks for one.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import os
import queue
import random
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accelkw_core.config.selection import handler_key
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import WorkerFailed
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.runtime.run_state import RunState

__all__ = [
    "WorkerFailed",
    "applied",
    "apply_handler",
    "compose_handlers",
    "free_port",
    "isolated_registry",
    "make_state",
    "modules_loaded_by",
    "plugin_of",
    "run_workers",
]


# How long a port handed out by free_port stays claimed against other processes: far longer
# than a test takes to bind it.
_PORT_CLAIM_S = 600.0


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now, that no other caller on this machine gets for minutes.

    A port the kernel picks (``bind`` to port 0) is in its ephemeral range, which every socket
    bound to port 0 draws from: gloo's listeners, clients' connections, another test process's
    ``free_port``. Under pytest-xdist one of them can take the port before a run's store binds it
    (``EADDRINUSE``), or a run's rank can meet another run's store on it and wait for a peer
    that never comes. On Linux the port is therefore picked below the ephemeral range and
    claimed by a file created exclusively in the temporary folder (claims older than ten
    minutes are taken back); elsewhere the kernel picks it.
    """
    low = _ephemeral_low()
    if low is None or low <= 10_000:
        return _kernel_port()
    claims = Path(tempfile.gettempdir()) / "accelkw-test-ports"
    claims.mkdir(exist_ok=True)
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10_000, low)
        claim = claims / str(port)
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - claim.stat().st_mtime > _PORT_CLAIM_S:
                    claim.unlink()
            continue
        os.close(fd)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use by something that did not ask here: keep it claimed
        return port
    return _kernel_port()


def _ephemeral_low() -> int | None:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_state(
    *,
    world_size: int = 1,
    rank: int = 0,
    mixed_precision: str = "no",
    device_type: str = "cpu",
    local_rank: int | None = None,
    local_world_size: int | None = None,
) -> RunState:
    """A state for the given facts, with no process group and no environment read.

    The local rank and local world size default to the global ones (one machine).
    """
    return RunState(
        mixed_precision=mixed_precision,
        cpu=device_type == "cpu",
        rank=rank,
        local_rank=rank if local_rank is None else local_rank,
        world_size=world_size,
        local_world_size=world_size if local_world_size is None else local_world_size,
        device_type=device_type,
    )


def apply_handler(handler: KwargsHandler, state: RunState | None = None) -> RunState:
    """Apply one handler to ``state`` (a fresh single-process CPU state by default) and return it.

    Only ``handler.apply`` runs: no other handler, no hook, no rollback, so its own exception
    reaches the test. Inspect ``state.messages(handler.name)`` (or ``state.log``) for what it
    did, and call ``state.run_teardowns()`` to undo it (or use :func:`applied`).
    """
    state = state if state is not None else make_state()
    handler.apply(state)
    state.handlers[handler_key(handler)] = handler
    return state


def plugin_of(*classes: type[KwargsHandler]) -> object:
    """A plugin object that registers ``classes``: for :func:`isolated_registry` in tests."""
    from accelkw_core.discovery.hookspecs import hookimpl

    class Plugin:
        @hookimpl
        def accelkw_register_handlers(self, register: Callable[[type], None]) -> None:
            for cls in classes:
                register(cls)

        def __repr__(self) -> str:
            return f"plugin_of({', '.join(c.__name__ for c in classes)})"

    return Plugin()


def isolated_registry(plugins: Iterable[object] = (), **kwargs: Any) -> Registry:
    """A registry that reads no entry points and holds only ``plugins`` (modules or objects).

    ``kwargs`` go to :class:`~accelkw_core.discovery.registry.Registry` (``allow``, ``deny``, ...).
    """
    registry = Registry(autoload=False, **kwargs)
    for plugin in plugins:
        registry.register_plugin(plugin)
    return registry


def compose_handlers(
    handlers: Sequence[KwargsHandler] = (),
    *,
    plugins: Iterable[object] = (),
    state: RunState | None = None,
    include_defaults: bool = True,
) -> RunState:
    """Compose ``handlers`` as the runtime does, in an isolated registry of ``plugins``.

    The handlers of ``plugins`` that are not in ``handlers`` join with default values (unless
    ``include_defaults`` is false), everything is ordered by ``after`` and applied, and the
    ``accelkw_state_ready`` hooks of ``plugins`` run. A failing ``apply`` rolls back and raises
    :class:`~accelkw_core.errors.HandlerApplyError`. Returns the state (a fresh single-process
    CPU state by default); ``state.handlers`` lists what was applied, in order.
    """
    state = state if state is not None else make_state()
    compose(state, handlers, registry=isolated_registry(plugins), include_defaults=include_defaults)
    return state


@contextmanager
def applied(
    *handlers: KwargsHandler,
    plugins: Iterable[object] = (),
    state: RunState | None = None,
    include_defaults: bool = False,
) -> Iterator[RunState]:
    """Compose ``handlers`` (see :func:`compose_handlers`), yield the state, then undo them.

    The teardowns run on exit even when the block raises, so a handler that changes process-wide
    settings leaves nothing behind; a teardown that fails is reported as an ``AssertionError``.
    """
    state = compose_handlers(
        handlers, plugins=plugins, state=state, include_defaults=include_defaults
    )
    try:
        yield state
    finally:
        failures = state.run_teardowns()
    if failures:
        raise AssertionError(
            "teardown failed: " + "; ".join(f"{name}: {err!r}" for name, err in failures)
        )


def _worker(
    target: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    args: Sequence[Any],
    env: Mapping[str, str],
    results: Any,
    stacks: str = "",
) -> None:
    if stacks:
        # Where this worker is when the parent finds it hung (SIGUSR1): every thread's stack,
        # for the failure's message. The file stays open for the worker's life.
        faulthandler.register(signal.SIGUSR1, file=open(stacks, "w"), all_threads=True)  # noqa: SIM115
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    try:
        value = target(rank, *args)
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
    else:
        results.put((rank, True, value))


def run_workers(
    target: Callable[..., Any],
    world_size: int = 2,
    *,
    args: Sequence[Any] = (),
    timeout: float = 60.0,
    allow_failures: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[Any]:
    """Run ``target(rank, *args)`` in ``world_size`` fresh processes with torchrun's variables set.

    Returns the per-rank return values (which must pickle), in rank order. A worker that raises,
    dies or outlives ``timeout`` seconds fails the call with :class:`WorkerFailed`, after every
    worker is killed, so a broken collective never hangs a test suite. With ``allow_failures``,
    a failed rank's entry is ``WorkerFailed`` holding its traceback instead.

    ``env`` adds environment variables in every worker (torchrun's variables take precedence).
    ``target`` must be importable by the children: a module-level function, not a lambda.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    stacks_dir = tempfile.TemporaryDirectory(prefix="accelkw-workers-")
    stacks = [os.path.join(stacks_dir.name, f"rank{r}.txt") for r in range(world_size)]
    procs = [
        ctx.Process(
            target=_worker,
            args=(target, r, world_size, port, tuple(args), dict(env or {}), results, stacks[r]),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    collected: dict[int, tuple[bool, Any]] = {}
    try:
        while len(collected) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                rank, ok, value = results.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                dead = [
                    r for r, p in enumerate(procs) if p.exitcode is not None and r not in collected
                ]
                for r in dead:
                    # A worker can exit before its result is flushed; give the queue a moment.
                    try:
                        rank, ok, value = results.get(timeout=1.0)
                        collected[rank] = (ok, value)
                    except queue.Empty:
                        collected[r] = (False, _silent_exit(r, procs[r].exitcode))
                continue
            collected[rank] = (ok, value)
    finally:
        hung = [r for r, p in enumerate(procs) if p.is_alive() and r not in collected]
        where = _where_hung(procs, hung, stacks)
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=10)
        stacks_dir.cleanup()
    out: list[Any] = []
    for r in range(world_size):
        if r not in collected:
            failure = WorkerFailed(
                f"rank {r} did not finish within {timeout:.0f}s"
                + (f"; where it was:\n{where[r]}" if where.get(r) else "")
                + "".join(
                    f"\nrank {o} did not finish either; where it was:\n{where[o]}"
                    for o in sorted(where)
                    if o != r
                )
            )
        elif not collected[r][0]:
            failure = WorkerFailed(f"rank {r} failed:\n{collected[r][1]}")
        else:
            out.append(collected[r][1])
            continue
        if not allow_failures:
            raise failure
        out.append(failure)
    return out


def _where_hung(procs: Sequence[Any], hung: Sequence[int], stacks: Sequence[str]) -> dict[int, str]:
    """Every thread's stack of each hung worker (faulthandler's dump on SIGUSR1), by rank."""
    for r in hung:
        try:
            os.kill(procs[r].pid, signal.SIGUSR1)
        except (OSError, TypeError):
            continue
    if hung:
        time.sleep(1.0)  # the dump is written by the worker's own signal handler
    where: dict[int, str] = {}
    for r in hung:
        try:
            with open(stacks[r]) as fh:
                where[r] = fh.read().strip()
        except OSError:
            continue
        native = _native_stacks(procs[r].pid)
        if native:
            where[r] += "\nNative stacks (gdb):\n" + native
    return where


def _native_stacks(pid: int) -> str:
    """Every thread's C stack of process ``pid`` (gdb's backtraces), or "" without gdb.

    A hang inside torch (a destructor joining a thread) shows no Python frame of its own.
    """
    import shutil
    import subprocess

    gdb = shutil.which("gdb")
    if gdb is None:
        return ""
    try:
        done = subprocess.run(
            [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 25"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    keep = [line for line in done.stdout.splitlines() if line.startswith(("Thread ", "#"))]
    return "\n".join(keep)


def _silent_exit(rank: int, code: int | None) -> str:
    why = (
        f"killed by signal {-code}"
        if code is not None and code < 0
        else "a crash, os._exit, or a return value that does not pickle"
    )
    return f"rank {rank} exited with code {code} without reporting a result ({why})"


def modules_loaded_by(
    code: str,
    prefix: str = "torch",
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> list[str]:
    """Run ``code`` in a fresh interpreter; return the loaded modules ``prefix`` or ``prefix.*``.

    Plugins must not import torch when they are imported (listing plugins stays fast), so a
    plugin's tests check ``modules_loaded_by("import my_plugin.plugin") == []``. ``code`` that
    fails raises ``AssertionError`` with its output.
    """
    import json
    import subprocess
    import sys

    probe = (
        f"{code}\nimport json as _j, sys as _s\n"
        f"print(_j.dumps(sorted(m for m in _s.modules if m == {prefix!r} "
        f"or m.startswith({prefix + '.'!r}))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the code failed (exit {proc.returncode}):\n{proc.stderr}")
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded
