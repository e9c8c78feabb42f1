"""Let gloo's worker threads finish before the interpreter shuts down.

gloo runs each collective on a worker thread ("pt_gloo_runloop") that drops its reference to the
finished work *after* the caller has been woken. Dropping it frees the work's tensors, which
needs the GIL. When a process ends right after a collective (a final ``gather``, then exit), the
interpreter can already be finalising by then: Python 3.11 ends such a thread mid-unwind and the
process aborts with "terminate called without an active exception" (SIGABRT, exit 134), even
though training finished. ``destroy_process_group`` does not stop these threads while a
``DistributedDataParallel`` model still holds the group. Releasing the GIL for a moment at exit
lets them drop their work first. (Seen with torch 2.13 on CPU; see pytorch/pytorch PR 179291.)

Measured when it was added: 4 of 30 runs of ``accelkw demo`` (2 processes, a final gather) on a
loaded 2-core machine aborted without the pause, 0 of 40 with it. The race depends on when the
operating system runs gloo's thread, so no run reproduces it every time: holding the GIL across
the final collective (``sys.setswitchinterval``) and 16 runs of a 2-process DDP script ending in
a gather, with and without the pause, all exited cleanly (4 December).
"""

from __future__ import annotations

import atexit
import time

__all__ = ["SETTLE_SECONDS", "settle_workers_at_exit"]

SETTLE_SECONDS = 0.05
_registered = False


def settle_workers_at_exit() -> None:
    """Register, once per process, the pause that lets gloo's workers finish before exit."""
    global _registered
    if not _registered:
        atexit.register(_settle)
        _registered = True


def _settle() -> None:
    time.sleep(SETTLE_SECONDS)
