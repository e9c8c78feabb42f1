"""What a checkpoint contribution writes and reads through: the writer and reader it is handed.

``save_state`` hands a :class:`CheckpointWriter` to every contribution that owns its files
(``CheckpointOwner.save_checkpoint``, ``ModelCheckpoint.save_checkpoint``), and ``load_state``
a :class:`CheckpointReader`. Both are ``Protocol``\\ s: the runtime's ``FolderWriter``
and ``FolderReader`` (in ``accelkw_core.runtime.checkpoints``) implement them, keeping every
file durable and every read checked
against the checkpoint's manifest. A file name is relative to the checkpoint's folder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "CheckpointFolder",
    "CheckpointManifest",
    "CheckpointReader",
    "CheckpointWriter",
    "SaveJob",
]


class CheckpointManifest(Protocol):
    """What a checkpoint written by accelkw says it holds (Accelerate's checkpoints have none).

    ``files``: every file, by its name relative to the folder; ``handlers``: the keys of the
    handlers whose state it holds; ``world_size`` and ``step``: of the run that wrote it.
    """

    @property
    def files(self) -> Mapping[str, object]: ...

    @property
    def handlers(self) -> Sequence[str]: ...

    @property
    def world_size(self) -> int: ...

    @property
    def step(self) -> int: ...


class CheckpointFolder(Protocol):
    """The folder of one checkpoint, as the process at hand writes or reads it.

    ``rank``, ``world_size`` and ``is_main_process`` say which process this is, so a
    contribution writes shared files once and its own shards on every process.
    """

    @property
    def folder(self) -> Path: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_main_process(self) -> bool: ...


class CheckpointWriter(CheckpointFolder, Protocol):
    """Writes the files of one checkpoint into its (temporary) folder, durably."""

    def write_bytes(self, name: str, data: bytes | memoryview) -> Path:
        """Write ``data`` to ``name``, recorded for the manifest and made durable."""
        ...

    def save(self, name: str, obj: Any, *, owner: str | None = None) -> Path:
        """``torch.save(obj)`` to ``name``; with ``owner``, checked at once to load with
        ``torch.load(weights_only=True)`` (the error names ``owner``)."""
        ...

    def save_tensors(self, name: str, tensors: dict[str, Any]) -> Path:
        """A dict of tensors as a safetensors file."""
        ...

    def record(self, name: str) -> None:
        """Record (and make durable) a file a library wrote into the folder itself."""
        ...

    def record_tree(self, name: str) -> None:
        """:meth:`record` every file under the sub-folder ``name``."""
        ...

    @property
    def writes_later(self) -> bool:
        """Whether this save's files are written after ``save_state`` returns (a save handed
        to a ``checkpoint_executor``, staged now): a contribution may then begin a write of its
        own that runs in the background (DCP's ``async_save``) and end it in :meth:`later`."""
        ...

    @property
    def group(self) -> Any:
        """The process group for the collectives of a write that goes on in the background,
        with the save's own (never the training's); ``None`` when there is none (one process,
        or a save written on the caller's thread)."""
        ...

    def later(
        self,
        finish: Callable[[CheckpointWriter], None],
        cancel: Callable[[], None] | None = None,
    ) -> None:
        """End a write the contribution began: ``finish(writer)`` waits for it and records its
        files through ``writer``. It runs where the save's files are written, in order with
        them, before they are synced and agreed: at once when :attr:`writes_later` is false,
        else on the executor's thread. ``cancel()`` runs instead when the save is abandoned
        before ``finish`` (the write must then stop without writing)."""
        ...


class CheckpointReader(CheckpointFolder, Protocol):
    """Reads the files of one checkpoint, each checked against its manifest before use.

    ``manifest`` is ``None`` for a checkpoint written by Accelerate (its files are checked by
    reading them whole). Reading changes no object of the run; a file that is missing, short or
    damaged is a :class:`~accelkw_core.errors.CheckpointError` naming it.
    """

    @property
    def manifest(self) -> CheckpointManifest | None: ...

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds ``name`` (a file, or a folder of files)."""
        ...

    def read_bytes(self, name: str) -> bytes:
        """The bytes of ``name``, checked."""
        ...

    def load(self, name: str, **load_kwargs: Any) -> Any:
        """``torch.load(weights_only=True)`` of ``name``, on the CPU."""
        ...

    def load_tensors(self, name: str) -> dict[str, Any]:
        """The tensors of the safetensors file ``name``."""
        ...

    def verify(self, name: str) -> Path:
        """Check ``name`` (size, then hash); its path."""
        ...

    def verify_tree(self, name: str) -> Path:
        """Check every file under the sub-folder ``name``; its path."""
        ...


class SaveJob(Protocol):
    """One ``save_state`` handed to a ``checkpoint_executor`` contribution.

    The runtime's ``BackgroundSave`` (in
    ``accelkw_core.runtime.checkpoints.background_save``) implements it.
    ``folder``: the checkpoint folder it saves, known before :meth:`stage`, so an executor can
    wait for an earlier save of the same folder first; ``distributed``: whether its commit
    agrees with other processes (sharded state on several processes: :meth:`commit` then needs
    the executor's process group; a save of replicated state is committed by its process
    alone, with no collective); ``notes``: what
    :meth:`stage` cleaned up, for warnings; ``staged_bytes``: the staged copy's size.
    """

    folder: Path
    distributed: bool
    notes: list[str]

    @property
    def staged_bytes(self) -> int:
        """Bytes of state the staged copy holds (0 before :meth:`stage`)."""
        ...

    def stage(self, group: Any = None) -> Path:
        """Lock, prepare and copy every state to CPU memory, on the caller's thread.

        ``group``: the process group :meth:`commit` will be given; a contribution that writes
        in the background (``CheckpointWriter.group``) runs its collectives on it too, before
        the commit's own, on the commit's thread."""
        ...

    def commit(self, group: Any = None) -> Path:
        """Write, sync, agree (on ``group``) and commit, once; raises a ``CheckpointError``
        naming the file on every process when it fails, the previous checkpoint kept."""
        ...
