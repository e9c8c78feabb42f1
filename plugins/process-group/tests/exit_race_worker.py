"""One rank of a run that ends while gloo's worker thread still waits for the GIL.

``python exit_race_worker.py RANK PORT [--without-pause]``, started twice by
``test_exit_guard.py``. The group is created by ``InitProcessGroupKwargs`` (which registers the
exit pause); ``--without-pause`` unregisters the pause again, to show what it prevents.

The script arranges deterministically what a run ending right after a collective meets by chance:

1. Rank 0 drops its handle on an ``all_gather`` before the collective can finish (rank 1 joins
   0.3 s late), so gloo's worker thread is left holding the last reference to the work.
2. The main thread waits for the result by reading the output's memory while holding the GIL.
   When the collective ends, the worker frees the work; each output tensor still has its Python
   object, so torch decrefs that object and asks for the GIL, which the main thread holds.
3. A long switch interval keeps the waiting worker from asking the main thread to give the GIL
   up, so the main thread runs on into interpreter finalisation while the worker waits (by chance,
   the main thread only has to get there within the default 5 ms).
4. An object that sleeps when it is finalised releases the GIL during finalisation, as closing a
   file or the default interval's expiry does. The worker takes the GIL, Python 3.11 ends the
   thread with ``pthread_exit`` because the interpreter is finalising, and the forced unwind
   through the work's ``noexcept`` destructor calls ``std::terminate``: SIGABRT.

With the pause, the main thread releases the GIL at exit before finalisation starts, the worker
frees the work, and both ranks exit 0.
"""

from __future__ import annotations

import atexit
import ctypes
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from accelkw_process_group import InitProcessGroupKwargs, _exit_guard

from accelkw_core.testing import apply_handler, make_state


class _ReleasesTheGilWhenFinalised:
    def __del__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        # Module globals such as ``time`` may already be None here: use the bound default.
        sleep(0.3)


def main(rank: int, port: int, with_pause: bool) -> None:
    handler = InitProcessGroupKwargs(backend="gloo", init_method=f"tcp://127.0.0.1:{port}")
    apply_handler(handler, make_state(world_size=2, rank=rank))
    if not with_pause:
        atexit.unregister(_exit_guard._settle)

    outputs = [torch.zeros(1) for _ in range(2)]
    peer = ctypes.c_float.from_address(outputs[1 - rank].data_ptr())
    if rank == 1:
        time.sleep(0.3)  # rank 0's collective cannot finish before rank 0 drops its handle
    sys.setswitchinterval(30.0)
    work = dist.all_gather(outputs, torch.full((1,), rank + 1.0), async_op=True)
    del work
    while peer.value == 0.0:  # reading the memory keeps the GIL (a torch call would release it)
        pass


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), "--without-pause" not in sys.argv[3:])
    # Finalised with the module's globals, after the interpreter has started finalising.
    finaliser = _ReleasesTheGilWhenFinalised()
