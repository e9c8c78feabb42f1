"""A save handed to a checkpoint executor: staged on the caller's thread, committed elsewhere.

``save_state`` with a ``checkpoint_executor`` contribution builds a :class:`BackgroundSave`
(``begin`` is ``begin_save`` with its arguments bound, called with ``group=``) and calls
``executor.submit(job)``. The executor calls :meth:`BackgroundSave.stage` on the caller's thread
(the lock taken, the folder prepared, every state copied to CPU memory, the processes agreed), then
:meth:`BackgroundSave.commit` where it likes (a thread of its own): the staged files written,
synced and hashed, the processes agreed on a process group the executor gives, the manifest
written, the folder committed, and, after the commit, what the run does then (``total_limit``'s
removals). The protocol is :mod:`~accelkw_core.runtime.checkpoints.save`'s, unchanged: the same
files, manifest and guarantees as a synchronous save.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import CheckpointWarning
from accelkw_core.runtime.checkpoints.agreement import alone, barrier

if TYPE_CHECKING:
    from accelkw_core.runtime.checkpoints.save import PendingSave
    from accelkw_core.runtime.run_state import RunState

__all__ = ["BackgroundSave"]


class BackgroundSave:
    """One ``save_state`` for a checkpoint executor.

    ``folder``: the checkpoint folder it saves (known before :meth:`stage`, so an executor can
    wait for an earlier save of the same folder first); ``distributed``: whether its commit
    agrees with other processes (a save of sharded state on several processes: the
    executor's process group is then needed by :meth:`commit`); a save of replicated state
    is committed by its process alone (``collective=False``) and needs none;
    ``notes``: what :meth:`stage` cleaned up, for warnings; ``staged_bytes``: the size of the
    staged copy, once staged.
    """

    def __init__(
        self,
        state: RunState,
        folder: Path,
        begin: Callable[..., PendingSave],
        after_commit: Callable[[], None],
        *,
        collective: bool = True,
    ) -> None:
        self.folder = folder
        self.distributed = collective and state.distributed
        self._collective = collective
        self.notes: list[str] = []
        self._state = state
        self._begin = begin
        self._after_commit = after_commit
        self._pending: PendingSave | None = None

    @property
    def staged_bytes(self) -> int:
        """Bytes of state the staged copy holds (0 before :meth:`stage`)."""
        return 0 if self._pending is None else self._pending.staged_bytes

    def stage(self, group: Any = None) -> Path:
        """Lock, prepare and copy every state to CPU memory; on the caller's thread, on every
        process, in the order of its ``save_state`` calls. Raises as a synchronous save would
        (a folder locked by another writer, a state torch would refuse); nothing is left then.

        ``group``: the process group :meth:`commit` will be given; the contributions' writes
        that go on in the background (``CheckpointWriter.group``) run their collectives on it,
        on the commit's thread, before the commit's own.
        """
        if self._pending is not None:
            raise RuntimeError(f"the save of {self.folder} is already staged")
        self._pending = self._begin(group=group)
        self.notes = list(self._pending.notes)
        return self.folder

    def commit(self, group: Any = None) -> Path:
        """Write, sync, agree (on ``group``), commit, then run what follows a commit; once.

        A failure is a :class:`~accelkw_core.errors.CheckpointError` naming the file, raised on
        every process; the checkpoint that was there is kept. Once committed, the save
        succeeded on every process: a failure of what follows is a warning.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError(f"the save of {self.folder} was not staged, or already committed")
        if not self._collective:
            with alone():
                return self._commit(pending, None)
        return self._commit(pending, group)

    def _commit(self, pending: PendingSave, group: Any) -> Path:
        folder = pending.complete(group)
        # The main process prunes (a machine's local main of save_on_each_node does not).
        if self._state.is_main_process:
            try:
                self._after_commit()
            except Exception as exc:
                # The checkpoint is committed: it was saved, on every process. What follows
                # (pruning old ones) is best effort, a warning on the main process only, so
                # the processes never part ways over it.
                warnings.warn(
                    f"save_state: {folder} was saved, but what follows its commit failed "
                    f"({type(exc).__name__}: {exc})",
                    CheckpointWarning,
                    stacklevel=2,
                )
        barrier(self._state, group)
        return folder
