"""Staging: a save's state copied into CPU memory, so it can be written after training goes on.

A save handed to a checkpoint executor (``checkpoint_executor`` point) writes its files later,
on another thread, while the caller trains. :class:`StagingWriter` takes the place of the
:class:`~accelkw_core.runtime.checkpoints.folder_io.FolderWriter` while the save's layout is
written: every write is kept, as a copy that shares no storage with a live object, and
:meth:`StagingWriter.replay` later hands the same writes, in the same order, to a real writer.
The files are then the ones a synchronous save writes, byte for byte: :func:`staged` copies
each tensor's whole storage, its offset and strides, as ``torch.save`` writes them, and two
tensors that shared a storage still share one copy. A CUDA tensor is copied into pinned CPU
memory, asynchronously, and the copies are waited for once, before the caller goes on.

Files a contributor wrote into the folder itself (a library's, DCP's) are on the disk already
and only recorded. A write a contributor began in the background (DCP's ``async_save``) is
ended by its ``later`` callback, replayed in its place: on the thread that writes the rest,
before anything is synced and agreed. Torch is imported inside the functions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkw_core.runtime.checkpoints.folder_io import FolderWriter

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = ["StagingWriter", "staged"]


def staged(obj: Any, memo: dict[Any, Any] | None = None) -> Any:
    """A copy of ``obj`` (a state dict) whose tensors live in CPU memory of their own.

    Dicts, lists and tuples are copied level by level; tensors by storage (see the module);
    anything else is deep-copied (numbers and strings are returned as they are).
    """
    import torch

    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        return _staged_tensor(obj, memo)
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) is not dict else {}
        for key, value in obj.items():
            out[key] = staged(value, memo)
        return out
    if isinstance(obj, list):
        return [staged(value, memo) for value in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(staged(value, memo) for value in obj)
    if isinstance(obj, int | float | str | bytes | bool) or obj is None:
        return obj
    return copy.deepcopy(obj)


def _staged_tensor(tensor: Any, memo: dict[Any, Any]) -> Any:
    import torch

    source = tensor.untyped_storage()
    # Keyed by the storage's address, so views of one storage (tied weights) share one copy;
    # the memo keeps the source alive beside its copy until the staging is settled. Without
    # it, a state made of temporaries (a full state dict gathered per call, random states
    # built fresh, a handler computing what it writes) frees a source whose address the next
    # temporary then gets, and the next would be "staged" as the earlier one's copy. The same
    # reference keeps a CUDA source alive until its asynchronous copy has been waited for.
    key = (source.device, source.data_ptr())
    found = memo.get(key) if source.nbytes() else None
    if found is not None:
        storage = found[1]
    else:
        pin = source.device.type == "cuda"
        buffer = torch.empty(source.nbytes(), dtype=torch.uint8, pin_memory=pin)
        storage = buffer.untyped_storage()
        storage.copy_(source, non_blocking=pin)
        if source.nbytes():
            memo[key] = (source, storage)
    out = torch.empty(0, dtype=tensor.dtype)
    out.set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=tensor.requires_grad)
    return out


class StagingWriter(FolderWriter):
    """A :class:`FolderWriter` that keeps every write, staged, for :meth:`replay`.

    ``save(..., owner=...)`` still serialises and checks the state now (a state torch would
    refuse fails the save at once, naming its owner); the rest is copied by :func:`staged`.
    """

    def __init__(self, folder: Path, state: RunState, group: Any = None) -> None:
        super().__init__(folder, state)
        self._ops: list[tuple[str, str, Any]] = []
        self._memo: dict[Any, Any] = {}
        self._group = group

    @property
    def writes_later(self) -> bool:
        """``True``: the files are written by :meth:`replay`, after ``save_state`` returns."""
        return True

    @property
    def group(self) -> Any:
        """The process group of the thread that replays (the executor's), or ``None``."""
        return self._group

    def later(
        self,
        finish: Callable[[FolderWriter], None],
        cancel: Callable[[], None] | None = None,
    ) -> None:
        self._ops.append(("later", "", (finish, cancel)))

    def write_bytes(self, name: str, data: bytes | memoryview) -> Path:
        kept = data if isinstance(data, bytes) else bytes(data)
        self._ops.append(("bytes", name, kept))
        return self.folder / name

    def save(self, name: str, obj: Any, *, owner: str | None = None) -> Path:
        if owner is not None:
            return super().save(name, obj, owner=owner)  # serialised and checked, then kept
        self._ops.append(("save", name, staged(obj, self._memo)))
        return self.folder / name

    def save_tensors(self, name: str, tensors: dict[str, Any]) -> Path:
        self._ops.append(("tensors", name, staged(tensors, self._memo)))
        return self.folder / name

    def record(self, name: str) -> None:
        self._ops.append(("record", name, None))

    def settle(self) -> None:
        """Wait for the copies out of CUDA memory (nothing to wait for on the CPU), then let go
        of the sources the memo kept alive."""
        import torch

        # torch.cuda.is_initialized has no annotations in torch (it returns a bool).
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
        self._memo.clear()

    def replay(self, writer: FolderWriter) -> None:
        """Make every kept write through ``writer`` (the real one), in order; keeps nothing.

        When one fails, the background writes not yet ended are cancelled (see
        :meth:`abandon`) before the failure is raised."""
        ops, self._ops = self._ops, []
        for i, (kind, name, value) in enumerate(ops):
            try:
                if kind == "bytes":
                    writer.write_bytes(name, value)
                elif kind == "save":
                    writer.save(name, value)
                elif kind == "tensors":
                    writer.save_tensors(name, value)
                elif kind == "later":
                    value[0](writer)
                else:
                    writer.record(name)
            except BaseException:
                self._ops = ops[i + 1 :]
                self.abandon()
                raise

    def abandon(self) -> None:
        """Drop what is kept; cancel each background write not yet ended (it would wait for
        its ``finish`` forever)."""
        ops, self._ops = self._ops, []
        for kind, _, value in ops:
            if kind == "later" and value[1] is not None:
                value[1]()

    def staged_bytes(self) -> int:
        """How many bytes of state are kept (the staging copy's size)."""
        import torch

        seen: dict[int, int] = {}

        def count(obj: Any) -> None:
            if isinstance(obj, torch.Tensor):
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
            elif isinstance(obj, dict):
                for value in obj.values():
                    count(value)
            elif isinstance(obj, list | tuple):
                for value in obj:
                    count(value)

        total = 0
        for _, _, value in self._ops:
            if isinstance(value, bytes):
                total += len(value)
            else:
                count(value)
        return total + sum(seen.values())
