"""``Shutdown``: the end of a run, once: pending saves, then the trackers, then the teardowns.

The ``Accelerator`` forwards ``end_training``, ``__exit__`` and a failed construction here, and
an interpreter exit reaches it too. Where the call comes from decides only ``agreed``: on the
normal path every process calls it and may agree on the outcome of background saves; on an
exit path (an exception unwinding, ``__exit__``, interpreter exit) no collective is entered.
"""

from __future__ import annotations

import atexit
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkw_core.runtime.checkpoints.manager import Checkpoints
    from accelkw_core.runtime.run_state import RunState
    from accelkw_core.runtime.trackers import Trackers

__all__ = ["Shutdown"]


class Shutdown:
    """Ends one run once; registered at interpreter exit until it has."""

    def __init__(self, state: RunState, checkpoints: Checkpoints, trackers: Trackers) -> None:
        self._state = state
        self._checkpoints = checkpoints
        self._trackers = trackers
        self.ended = False
        # A run nobody ended still undoes its handlers (a process group) once, at exit.
        self._at_exit = _end_at_exit(self)

    def end(self, *, agreed: bool) -> None:
        """End the run, unless it has ended; ``agreed``: every process calls it (normal path).

        A teardown that fails warns (attributed to the caller of the ``Accelerator`` member
        that called this); a failed background save is raised, then the first tracker whose
        ``finish`` failed.
        """
        if self.ended:
            return
        self.ended = True
        atexit.unregister(self._at_exit)
        # Pending saves first: a teardown may destroy the process group they agree on.
        saving_failure: BaseException | None = None
        tracker_failures: list[tuple[str, BaseException]] = []
        try:
            self._checkpoints.wait_for_checkpoints(agreed=agreed)
        except Exception as failed:
            saving_failure = failed
        finally:
            # Even when the wait is interrupted (Ctrl-C): the trackers finish and the
            # teardowns run, once, and the interruption goes on after them.
            try:
                tracker_failures = list(self._trackers.finish())
            finally:
                for name, exc in self._state.run_teardowns():
                    warnings.warn(
                        f"teardown of handler {name!r} failed: {type(exc).__name__}: {exc}",
                        stacklevel=3,
                    )
        if saving_failure is not None:
            for name, exc in tracker_failures:
                saving_failure.add_note(f"tracker {name!r} failed to finish too: {exc!r}")
            raise saving_failure
        if tracker_failures:
            raise tracker_failures[0][1]


def _end_at_exit(shutdown: Shutdown) -> Callable[[], None]:
    # A weak reference: registering must not keep the run (and its models) alive.
    ref = weakref.ref(shutdown)

    def run() -> None:
        live = ref()
        if live is not None:
            live.end(agreed=False)  # interpreter exit, perhaps after an error: no collective

    atexit.register(run)
    return run
