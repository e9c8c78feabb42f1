"""``python -m accelkw_core.cli.torchrun ARGS``: ``torch.distributed.run``, with the exit status
of the first worker that failed (torchrun itself exits 1 for any failure), and a configuration
error raised in the workers printed once, not once per rank.

``accelkw launch`` runs this module; the engine is torchrun's own ``main``. Each worker runs
through :mod:`accelkw_core.cli.worker`, which dies with this process and leaves an
``AccelkwError`` in a folder this module reads, instead of a traceback. A worker torchrun lost
track of, started as a signal arrived, is stopped as torchrun stops the others
(:func:`_stop_lost_workers`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence

__all__ = ["exit_status", "main", "worker_errors"]

# How long a lost worker gets to stop after its signal before it is killed: torchrun's own
# default for the workers it knows. After a Ctrl-C the launcher kills everything sooner.
_LOST_WORKER_GRACE_S = 30.0


def exit_status(code: int) -> int:
    """A process exit code as a shell sees it: ``-N`` (killed by signal N) becomes ``128 + N``."""
    if code < 0:
        return 128 - code
    return code if code > 0 else 1


def worker_errors(folder: str) -> dict[str, list[int]]:
    """The distinct errors the workers left in ``folder``, each with the ranks that raised it."""
    found: dict[str, list[int]] = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("rank") and name.endswith(".txt") and name[4:-4].isdigit():
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                found.setdefault(fh.read().strip(), []).append(int(name[4:-4]))
    return {text: sorted(ranks) for text, ranks in found.items()}


def main(argv: Sequence[str] | None = None) -> int:
    import shutil
    import tempfile

    from accelkw_core.cli.worker import ERRORS_ENV, PARENT_ENV

    folder = tempfile.mkdtemp(prefix="accelkw-launch-")
    # Inherited by every worker torchrun starts (torchrun copies this process's environment).
    os.environ[ERRORS_ENV] = folder
    os.environ[PARENT_ENV] = str(os.getpid())
    try:
        return _run(list(argv) if argv is not None else sys.argv[1:], folder)
    except KeyboardInterrupt:  # a Ctrl-C before torchrun installed its own handlers
        return 130
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(argv: list[str], folder: str) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    from accelkw_core.cli.worker import CHECK_ENV
    from accelkw_core.errors import AccelkwError

    if os.environ.get(CHECK_ENV):
        # Here, torch imported: the run's handlers planned for conflicts before any worker.
        from accelkw_core.cli.launch_cmd import check_before_workers

        try:
            check_before_workers(os.environ)
        except AccelkwError as exc:
            for line in str(exc).splitlines():
                print(f"accelkw: error: {line}", file=sys.stderr)
            return 1
        finally:
            os.environ.pop(CHECK_ENV, None)  # not the workers' business
    try:
        torchrun_main(argv)
    except ChildFailedError as exc:
        errors = worker_errors(folder)
        for text, ranks in errors.items():
            on = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
            for line in text.splitlines() or [""]:
                print(f"accelkw: error: {line} ({on})", file=sys.stderr)
        explained = {rank for ranks in errors.values() for rank in ranks}
        if not set(exc.failures) <= explained:  # keyed by global rank
            print(exc, file=sys.stderr)  # torchrun's report of the failures not explained above
        return exit_status(exc.get_first_failure()[1].exitcode)
    except SignalException as exc:
        _stop_lost_workers(exc.sigval)
        return 128 + int(exc.sigval)
    return 0


def _lost_workers() -> list[int]:
    """The pids of this process's children that lead a session of their own (Linux ``/proc``).

    torchrun starts each worker so, and nothing else this process starts is; once torchrun has
    returned, every such child is a worker it did not stop. Empty where there is no ``/proc``.
    """
    me = str(os.getpid())
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 3 and fields[1] == me and fields[3] == name:
            found.append(int(name))
    return found


def _stop_lost_workers(signum: int, grace: float = _LOST_WORKER_GRACE_S) -> list[int]:
    """Stop the workers torchrun lost track of, as it stops the others; return their pids.

    torchrun's agent handles a signal by raising an exception in its main thread, which may be
    in the middle of starting the workers: after the first has been forked and before the
    agent has recorded them, so its shutdown stops none of those already started. They run in
    sessions of their own, so no Ctrl-C reaches them, and they would run the script until this
    process exits (their parent-death signal, :mod:`accelkw_core.cli.worker`). Each is sent
    ``signum`` (its whole process group), given ``grace`` seconds, then killed (at once at a
    second signal).
    """
    pids = _lost_workers()
    for pid in pids:
        _signal_group(pid, signum)
    waiting = set(pids)
    deadline = time.monotonic() + grace
    try:
        while waiting and time.monotonic() < deadline:
            waiting = {pid for pid in waiting if not _reaped(pid)}
            if waiting:
                time.sleep(0.05)
    finally:  # also at a second signal, which torchrun's handler raises here
        for pid in waiting:
            _signal_group(pid, signal.SIGKILL)
            _reaped(pid, block=True)
    return pids


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)  # the worker leads its group: its own children get it too


def _reaped(pid: int, *, block: bool = False) -> bool:
    try:
        done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere
        return True
    return done == pid


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
