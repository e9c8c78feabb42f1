"""The ``checkpoint_executor`` contribution: saves committed on a thread, in order.

One worker thread commits the saves in the order ``save_state`` staged them. A save of
replicated state (DDP) is committed by its process alone, with no collective: a save from the
main process only stays the main process's business. A save of sharded state (FSDP) agrees
across the processes, so every process issues its commit's collectives in the same order, on
a process group made for them (gloo, created once, on the caller's thread, at the first such
save, which every process makes): they never interleave with the training's own collectives. A failure is kept
and raised once, at the next ``submit`` or ``wait``. The worker is a ``ThreadPoolExecutor``'s:
Python finishes its queued saves at interpreter exit, before the ``atexit`` handlers run.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from accelkw_core.plugin import CheckpointError, SaveJob

__all__ = ["BackgroundSaves"]


class BackgroundSaves:
    """Stages each save on the caller's thread and commits it on a worker thread.

    ``max_pending``: how many saves may be in flight; ``submit`` first waits for the oldest
    (and for any earlier save of the same folder, whose writer lock it holds).
    """

    def __init__(self, max_pending: int = 1) -> None:
        self.max_pending = max_pending
        self._pending: deque[tuple[Path, Future[Path]]] = deque()
        self._failure: CheckpointError | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._group: Any = None
        self._grouped = False
        self._guard = threading.Lock()
        #: The size in bytes of the largest staged copy so far (the memory a save costs).
        self.peak_staged_bytes = 0

    def submit(self, job: SaveJob) -> None:
        """Wait for room, stage ``job`` here, and queue its commit on the worker thread.

        Which saves it waits for depends only on the saves submitted (never on which happen
        to be done already), so a failed one is raised at the same call wherever the same
        saves were submitted (every process, for sharded state, whose commits agree).
        """
        while self._pending and (
            len(self._pending) >= self.max_pending
            or any(folder == job.folder for folder, _ in self._pending)
        ):
            self._wait_oldest()
        self._raise_failure()
        group = self._side_group(job)
        job.stage(group)
        self.peak_staged_bytes = max(self.peak_staged_bytes, job.staged_bytes)
        with self._guard:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkw-async")
            self._pending.append((job.folder, self._pool.submit(job.commit, group)))

    def wait(self) -> None:
        """Return once every submitted save is committed; raise a failed one's error, once."""
        while self._pending:
            self._wait_oldest()
        self._raise_failure()

    def close(self) -> None:
        """The teardown: finish pending saves, stop the worker and destroy the process group
        made for the commits (a failure was raised by the runtime's ``wait`` before teardowns
        run, or is dropped with the run)."""
        try:
            while self._pending:
                self._wait_oldest()
        finally:
            with self._guard:
                pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)
            self._destroy_group()

    def _destroy_group(self) -> None:
        # The group is the run's: a process that runs several (a sweep, a notebook) would
        # otherwise keep one gloo group, its sockets and threads, per run that ended. Every
        # process's teardown reaches here, once the worker is stopped; if the default group is
        # already destroyed, every group went with it.
        group, self._group = self._group, None
        self._grouped = False
        if group is None:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group(group)

    def _wait_oldest(self) -> None:
        folder, future = self._pending[0]
        try:
            future.result()
        except BaseException as exc:
            if not future.done() or future.exception() is not exc:
                # Interrupted while waiting (Ctrl-C): the save goes on and stays tracked.
                raise
            self._record(folder, exc)
        self._pending.popleft()

    def _record(self, folder: Path, exc: BaseException) -> None:
        """Keep a failed save's error to raise; a later one is a note on the first."""
        if self._failure is not None:
            self._failure.add_note(f"{folder} was not saved either: {_one_line(exc)}")
            return
        failure = CheckpointError(
            folder,
            f"was not saved: its background save failed ({_one_line(exc)}); "
            "the checkpoint saved there before is kept",
        )
        failure.__cause__ = exc
        self._failure = failure

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _side_group(self, job: SaveJob) -> Any:
        if self._grouped or not job.distributed:
            return self._group
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            # Every process's first save of sharded state reaches here in the same order (a
            # collective save, every process checked present first): new_group is itself a
            # collective of the default group, made on the caller's thread.
            self._group = dist.new_group(backend="gloo")
        self._grouped = True
        return self._group


def _one_line(exc: BaseException) -> str:
    # A CheckpointError's own "checkpoint:" prefix is left out: the message quoting it has one.
    quoted = f"{exc.path} {exc.problem}" if isinstance(exc, CheckpointError) else str(exc)
    text = quoted.strip()
    return text.splitlines()[0] if text else type(exc).__name__
