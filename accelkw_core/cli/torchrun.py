"""``python -m accelkw_core.cli.torchrun ARGS``: ``torch.distributed.run``, with the exit status
of the first worker that failed (torchrun itself exits 1 for any failure).

``accelkw launch`` runs this module; the engine is torchrun's own ``main``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["exit_status", "main"]


def exit_status(code: int) -> int:
    """A process exit code as a shell sees it: ``-N`` (killed by signal N) becomes ``128 + N``."""
    if code < 0:
        return 128 - code
    return code if code > 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(list(argv) if argv is not None else sys.argv[1:])
    except ChildFailedError as exc:
        print(exc, file=sys.stderr)
        return exit_status(exc.get_first_failure()[1].exitcode)
    except SignalException as exc:
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
