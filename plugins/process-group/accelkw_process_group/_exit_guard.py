"""Let gloo's worker threads release finished work before the interpreter finalises.

The race (torch 2.13, Python 3.11 to 3.13, seen as SIGABRT, exit 134, "terminate called without an
active exception", after a run that ended right after a collective):

1. gloo runs each collective on a worker thread ("pt_gloo_runloop"). It completes the work's
   future, which wakes the caller, and only then drops its own reference to the work.
2. When the caller has already let go of the work (a synchronous ``all_gather`` or ``gather``
   drops it as it returns), that drop destroys the work and its tensors. A tensor whose Python
   object is alive goes from two owners to one, and torch then decrefs the Python object
   (``TensorImpl::decref_pyobject``), which takes the GIL.
3. The woken main thread holds the GIL and may run on into interpreter finalisation before
   giving it up: a thread waiting for the GIL only asks for it after the switch interval (5 ms).
4. Once finalisation has begun, Python 3.11 to 3.13 end a thread that waits for the GIL with
   ``pthread_exit``. The forced unwind runs into the work's destructor, which is ``noexcept``,
   so the C++ runtime calls ``std::terminate``. (Python 3.14 parks the thread instead.)

The backtrace of the abort, taken with gdb: ``take_gil`` -> ``PyThread_exit_thread`` in
``PyEval_AcquireThread`` <- ``pybind11::gil_scoped_acquire`` <- ``ConcretePyInterpreterVTable::
decref`` <- ``TensorImpl::decref_pyobject`` <- ``~AsyncAllgatherWork`` <- ``ProcessGroupGloo::
runLoop``, while the main thread is in ``Py_FinalizeEx``.

The remedy: an ``atexit`` callback (it runs before finalisation) sleeps 50 ms, releasing the GIL.
A worker already waiting gets it and finishes its drop; a worker just woken, which needs only
microseconds of CPU to reach that point, has 50 ms for the operating system to run it. Only a
thread kept off the CPU for longer than that can still lose the race. ``tests/test_exit_guard.py::
test_a_run_ending_while_gloo_waits_for_the_gil_exits_cleanly_only_with_the_pause`` makes the
race happen every time (the worker left holding the last reference to an ``all_gather``, a long
switch interval, the GIL released during finalisation): 10 of 10 runs aborted without the pause,
0 of 10 with it (5 December); before that, 4 of 30 ``accelkw demo`` runs on a loaded 2-core
machine aborted without it, 0 of 40 with it. Accelerate has no such pause: its own 2-process run
in ``tests/conformance/test_ported_script.py`` aborted so in CI on 5 December, its work done.

Why a pause and not a join: torch offers one synchronisation with these threads, the
destructor of ``ProcessGroupGloo``, which waits for its queue and joins them; it runs only when
the last reference to the group goes. ``destroy_process_group`` does not get there: gloo has no
``shutdown``, and the group stays alive (both worker threads still running, the race still
there in 4 of 5 runs of the test's script) until the garbage collector breaks a reference
cycle, and for as long as a ``DistributedDataParallel`` model's reducer holds it, which for a
user's model is until finalisation. A ``gc.collect()`` after the destroy did join them (3 of 3
clean), but costs more than the pause and does nothing under DDP.

The same wait can turn into a deadlock before exit. ``ProcessGroupGloo``'s destructor joins the
worker threads, and it runs where the group's last reference goes: after ``end_training``
destroyed the group, that is wherever the run's ``DistributedDataParallel`` model is freed (a
training function returning), inside the reducer's own destructor. If that thread holds the GIL
while a worker waits for it to free a finished work, neither moves again. Seen in CI three times
on 7 December, never when the test ran alone: a 2-process fp8 run hung at its function's
return; faulthandler showed the main thread there and one other thread with a Python state but
no Python frame, the sign of a C++ thread inside a GIL acquisition (the main thread, blocked in
C, held the GIL, or that thread would have run on). So the teardown keeps the group it destroyed
(:func:`retire`): its last reference then never goes on a user's thread; the retired groups are
let go at the next group this handler creates, after a pause like the exit's, or at interpreter
exit after the pause, as a DDP model's group always was. A reproduction that makes the deadlock
happen every time was not found (the GIL is released while the group is destroyed, which lets a
waiting worker through); ``tests/test_process_group_multiprocess.py::
test_a_destroyed_group_is_kept_until_the_next_group_is_created`` checks the mechanism.
"""

from __future__ import annotations

import atexit
import time
from typing import Any

__all__ = ["SETTLE_SECONDS", "release_retired", "retire", "settle_workers_at_exit"]

SETTLE_SECONDS = 0.05
_registered = False
# Groups this handler destroyed, kept so that their destructor (which joins gloo's worker
# threads while holding the GIL) never runs on a user's thread: see the module's docstring.
_RETIRED: list[Any] = []


def settle_workers_at_exit() -> None:
    """Register, once per process, the pause that lets gloo's workers finish before exit.

    It is registered when the group is created, so it runs after the ``atexit`` callbacks
    registered later (an ``Accelerator``'s end of run, with its last collectives).
    """
    global _registered
    if not _registered:
        atexit.register(_settle)
        _registered = True


def _settle() -> None:
    time.sleep(SETTLE_SECONDS)


def retire(group: Any) -> None:
    """Keep ``group``, just destroyed, until :func:`release_retired` or interpreter exit."""
    _RETIRED.append(group)


def release_retired() -> None:
    """Let go of the retired groups, once their workers had a pause to take the GIL.

    Called before a new group is created, long after the retired ones' last collective; a
    group a user's object (a DDP model) still holds lives on with it, as it would have.
    """
    if _RETIRED:
        time.sleep(SETTLE_SECONDS)  # releases the GIL to any worker still waiting for it
        _RETIRED.clear()
