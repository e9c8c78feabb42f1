"""Sharded saves written in the background: DCP's ``async_save``, begun when the save is staged.

A save handed to a ``checkpoint_executor`` is staged on the caller's thread and written on the
executor's (``writer.writes_later``). There, :func:`save_later` calls
``torch.distributed.checkpoint.async_save`` with :class:`GatedStager`: DCP's own
``DefaultStager`` copies the shards into CPU memory at once (a copy that shares nothing with
the live shards, so training may go on), and ``async_save`` returns. Its upload thread waits
for the staged copy, which the stager hands over only when the executor's thread reaches this
write (``writer.later``): DCP's collectives then run on the save's own process group
(``writer.group``) while the executor's thread waits for them, so they never interleave with
the training's collectives, nor with another DCP write's or the commit's agreement on that
group. The files DCP wrote are then recorded, synced and agreed like every other file of the
save, and only then is the manifest written and the folder committed.

Torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from accelkw_core.plugin import CheckpointError, CheckpointWriter

__all__ = ["GatedStager", "save_later"]


class GatedStager:
    """An ``AsyncStager`` for ``async_save``: DCP's ``DefaultStager`` copies the state now, and
    the copy goes to the upload thread on :meth:`open` (or the upload fails on :meth:`cancel`)."""

    # Read by async_save through the ``should_synchronize_after_execute`` property: staging is
    # over when ``stage`` returns, nothing to wait for after the upload starts.
    _synchronize_after_execute = False

    def __init__(self) -> None:
        import torch
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        cuda = torch.cuda.is_available()
        self._stager = DefaultStager(
            StagingOptions(
                use_pinned_memory=cuda,
                use_shared_memory=False,
                use_async_staging=False,
                use_non_blocking_copy=False,
            )
        )
        self._gate: Future[None] = Future()

    @property
    def should_synchronize_after_execute(self) -> bool:
        return self._synchronize_after_execute

    def stage(self, state_dict: dict[str, Any]) -> Future[dict[str, Any]]:
        """Copy ``state_dict`` into CPU memory now; the future holds it once :meth:`open`."""
        staged = self._stager.stage(state_dict)
        handed: Future[dict[str, Any]] = Future()

        def hand_over(gate: Future[None]) -> None:
            error = gate.exception()
            if error is not None:
                handed.set_exception(error)
            else:
                handed.set_result(staged)  # type: ignore[arg-type]

        self._gate.add_done_callback(hand_over)
        return handed

    def synchronize_staging(self) -> None:
        """Nothing to wait for: :meth:`stage` copies before it returns."""

    def close(self) -> None:
        self._stager.close()

    def open(self) -> None:
        """Hand the staged copy to DCP's upload thread: it writes now."""
        self._gate.set_result(None)

    def cancel(self, folder: Any) -> None:
        """Fail the upload before it writes anything (the save was abandoned)."""
        if not self._gate.done():
            self._gate.set_exception(
                CheckpointError(folder, "was not written: the save was abandoned")
            )


def save_later(
    writer: CheckpointWriter,
    name: str,
    state: dict[str, Any],
    then: Callable[[CheckpointWriter], None],
) -> None:
    """Save ``state`` with DCP under ``name`` in the background; ``then(writer)`` records the
    files once written. Stages now; see the module for the order of the rest."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse, async_save

    folder = writer.folder / name
    stager = GatedStager()
    try:
        response = async_save(
            state,
            storage_writer=FileSystemWriter(folder),
            process_group=writer.group,
            async_stager=stager,
        )
    except BaseException:
        stager.close()
        raise
    # A stager whose stage returns a future makes async_save answer with both futures.
    upload: Future[Any] = (
        response.upload_completion if isinstance(response, AsyncSaveResponse) else response
    )

    def finish(real: CheckpointWriter) -> None:
        stager.open()
        try:
            upload.result()
        finally:
            stager.close()
        then(real)

    def cancel() -> None:
        stager.cancel(folder)
        try:
            upload.result()  # fails at once: the upload thread ends without writing
        except BaseException:  # the failure is the one cancel gave, or one already raised
            pass
        finally:
            stager.close()

    writer.later(finish, cancel)
