"""``python -m accelkw_core.cli.torchrun ARGS``: ``torch.distributed.run``, with the exit status
of the first worker that failed (torchrun itself exits 1 for any failure), and a configuration
error raised in the workers printed once, not once per rank.

``accelkw launch`` runs this module; the engine is torchrun's own ``main``. Each worker runs
through :mod:`accelkw_core.cli.worker`, which dies with this process and leaves an
``AccelkwError`` in a folder this module reads, instead of a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["exit_status", "main", "worker_errors"]


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

    try:
        torchrun_main(argv)
    except ChildFailedError as exc:
        errors = worker_errors(folder)
        for text, ranks in errors.items():
            on = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
            print(f"accelkw: error: {text} ({on})", file=sys.stderr)
        explained = {rank for ranks in errors.values() for rank in ranks}
        if not set(exc.failures) <= explained:  # keyed by global rank
            print(exc, file=sys.stderr)  # torchrun's report of the failures not explained above
        return exit_status(exc.get_first_failure()[1].exitcode)
    except SignalException as exc:
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
