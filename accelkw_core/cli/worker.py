"""``python -m accelkw_core.cli.worker [--module] TARGET ARGS``: how ``accelkw launch`` starts
each worker, so that no worker outlives its launch and a configuration error reads once.

1. On Linux the worker asks the kernel for SIGKILL when its parent (torchrun's agent) dies
   (``prctl(PR_SET_PDEATHSIG)``): torchrun starts each worker in a session of its own, so after a
   ``kill -9`` of the launch nothing else would stop it. torchrun has no option for this.
2. It runs TARGET as ``python TARGET ARGS`` (or ``python -m TARGET ARGS``) would.
3. An :class:`~accelkw_core.errors.AccelkwError` that escapes the script (a ``ConfigError`` from
   ``Accelerator()``) is written to ``$ACCELKW_LAUNCH_ERRORS/rank<R>.txt`` instead of a traceback
   on every rank; the agent (:mod:`accelkw_core.cli.torchrun`) prints each distinct message once.
   Without that folder (a direct run) it is printed here, one line, and the exit status is 1.
   A worker restarted by ``--max-restarts`` first removes what its rank left there before.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from collections.abc import Sequence

__all__ = ["ERRORS_ENV", "PARENT_ENV", "die_with_parent", "main"]

ERRORS_ENV = "ACCELKW_LAUNCH_ERRORS"
PARENT_ENV = "ACCELKW_LAUNCH_PARENT"
# Set by `accelkw launch` for accelkw_core.cli.torchrun: the world size to check the run's
# handlers for conflicts on before any worker starts (removed before torchrun runs).
CHECK_ENV = "ACCELKW_LAUNCH_CHECK"
_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int, parent: int | None = None) -> None:
    """Have the kernel send ``signum`` to this process when its parent exits (Linux only).

    ``parent``, the pid the parent had, closes the race of a parent that died before the call:
    then this process has already been re-parented, and it exits at once.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(128 + signum)


def _run(target: str, args: Sequence[str], module: bool) -> None:
    if module:
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        # As `python SCRIPT`: the script's folder first on sys.path, argv[0] the script.
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    words = list(sys.argv[1:] if argv is None else argv)
    module = words[:1] == ["--module"]
    if module:
        words = words[1:]
    target, args = words[0], words[1:]
    parent = os.environ.get(PARENT_ENV)
    die_with_parent(signal.SIGKILL, int(parent) if parent and parent.isdigit() else None)
    _forget_earlier_error()
    from accelkw_core.errors import AccelkwError

    try:
        _run(target, args, module)
    except AccelkwError as exc:
        _report(exc)
        return 1
    return 0


def _error_file() -> str | None:
    folder = os.environ.get(ERRORS_ENV)
    if folder and os.path.isdir(folder):
        return os.path.join(folder, f"rank{os.environ.get('RANK', '0')}.txt")
    return None


def _forget_earlier_error() -> None:
    """Remove what this rank reported in an earlier attempt (``--max-restarts``): the agent
    reports the errors of the attempt that ended the run, not of one that was restarted."""
    path = _error_file()
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _report(exc: BaseException) -> None:
    # Several errors at once (ConfigErrors) stay a line each.
    text = f"{exc}"
    path = _error_file()
    if path is not None:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)  # the agent never reads half a message
    else:
        for line in text.splitlines() or [""]:
            print(f"accelkw: error: {line}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
