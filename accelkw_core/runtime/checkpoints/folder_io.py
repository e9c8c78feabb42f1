"""The writer and reader a checkpoint's contributors use: every file durable, every read checked.

``save_state`` hands a :class:`FolderWriter` to the core's own layout and to each handler that owns
its checkpoint (``save_checkpoint(writer)``); every file written through it is fsynced and
recorded, size and XXH3-64 hash, for the manifest; a write that fails (a full disk) is one
:class:`~accelkw_core.errors.CheckpointError` naming the file. ``load_state`` hands a
:class:`FolderReader`: each read is checked against the manifest first (a checkpoint written by
Accelerate has none, and is checked by reading it whole), a file that is a link out of the folder
is refused, and a file that is missing, short or damaged is one
:class:`~accelkw_core.errors.CheckpointError` naming it. Torch is imported inside the methods.
"""

from __future__ import annotations

import io
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from accelkw_core.errors import CheckpointError
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.atomic_folders import (
    FileEntry,
    entry_of,
    fsync_dir,
    write_error,
)
from accelkw_core.runtime.checkpoints.manifest import Manifest

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Future, ThreadPoolExecutor

    from accelkw_core.runtime.run_state import RunState

__all__ = ["FolderReader", "FolderWriter"]

T = TypeVar("T")

# How safetensors words the OS error of a failed write: "... (os error 28)".
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _relative(name: str) -> str:
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"checkpoint file name {name!r}: expected a path inside the folder")
    return path.as_posix()


class FolderWriter:
    """Writes the files of one checkpoint into its (temporary) folder, durably.

    ``folder`` is the folder being written; ``rank``, ``world_size`` and ``is_main_process``
    say which process this is, so a contributor writes shared files once and its own shards on
    every rank. ``entries`` holds what this process wrote, for the manifest, once
    :meth:`finish` has synced it.
    """

    def __init__(self, folder: Path, state: RunState) -> None:
        self.folder = folder
        self.rank = state.rank
        self.world_size = state.world_size
        self.is_main_process = state.is_main_process
        self.entries: dict[str, FileEntry] = {}
        # Files a library wrote into the folder: hashed and synced by finish().
        self._written: list[str] = []
        # Files written here whose entry is known as they are written (the bytes hashed on
        # their way to the file): only synced by finish().
        self._hashed: dict[str, FileEntry] = {}
        # Background jobs, each ending with its file's entry: a large file (an optimizer's,
        # the weights') fsynced, and the weights' hashed, while the caller writes the next
        # file. The files themselves are written one after the other on the caller's thread:
        # two threads filling the page cache at once were slower, not faster, on the 2-core
        # machines measured (docs/benchmarks.md), while the disk's writeback of one file
        # overlaps the copying of the next.
        self._pending: dict[str, Future[FileEntry]] = {}
        self._writer: ThreadPoolExecutor | None = None

    @property
    def writes_later(self) -> bool:
        """``False``: the files are written now, on the caller's thread."""
        return False

    @property
    def group(self) -> Any:
        """``None``: nothing of this save runs in the background."""
        return None

    def later(
        self,
        finish: Callable[[FolderWriter], None],
        cancel: Callable[[], None] | None = None,
    ) -> None:
        """``finish(self)`` at once: the files are written now."""
        finish(self)

    def finish(self) -> dict[str, FileEntry]:
        """Wait for every file to be written, then sync them all; what this process wrote.

        Each file is hashed as it is written (the weights' just after, on a thread). The two
        large files (the optimizer's and the weights') are synced by background jobs as soon
        as each is written, so the disk takes one while the next is being copied into the
        page cache; the rest are synced here, once all are written.
        """
        error: BaseException | None = None
        try:
            for name, future in self._pending.items():
                try:
                    # Each job synced its file: listed as done, not synced again below.
                    self.entries[name] = future.result()
                except BaseException as exc:  # every job is waited for before raising
                    error = error or exc
        finally:
            # None may write into the folder once the caller has moved on to removing it.
            if self._writer is not None:
                self._writer.shutdown(wait=True, cancel_futures=True)
            self._pending.clear()
            self._writer = None
        if error is not None:
            raise error
        names = [*self.entries, *self._hashed, *self._written]
        self.entries.update(_sync_all(self.folder, self._written, self._hashed))
        folders = {(self.folder / name).parent for name in names}
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(folder)
        self._written.clear()
        self._hashed.clear()
        return dict(self.entries)

    def _submit(self, name: str, job: Callable[[], FileEntry]) -> None:
        """Run ``job`` (which writes or reads ``name`` and returns its entry) on a thread."""
        from concurrent.futures import Future, ThreadPoolExecutor

        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="accelkw-save")
        try:
            self._pending[name] = self._writer.submit(job)
        except RuntimeError:
            # The interpreter is exiting (a background save finishing as its process ends, after
            # an error): no new thread may start, so the job runs here.
            done: Future[FileEntry] = Future()
            try:
                done.set_result(job())
            except BaseException as exc:
                done.set_exception(exc)
            self._pending[name] = done

    def write_bytes(self, name: str, data: bytes | memoryview) -> Path:
        """Write ``data`` to ``name`` (relative to the folder), recorded; synced by :meth:`finish`."""
        path = self._path(name)
        try:
            with atomic_folders.open_new(path) as fh:
                fh.write(data)
        except OSError as exc:
            raise write_error(path, exc) from exc
        self._hashed[_relative(name)] = FileEntry(
            memoryview(data).nbytes, atomic_folders.checksum(data)
        )
        return path

    def save(self, name: str, obj: Any, *, owner: str | None = None) -> Path:
        """``torch.save(obj)`` to ``name``.

        With ``owner`` (who the state belongs to, for the message), the bytes are first read
        back with ``torch.load(weights_only=True)``, as ``load_state`` will read them, so a
        state torch refuses fails now, naming ``owner``, and not at load time. Without it (an
        optimizer's state, which is tensors and numbers, and large) it is written straight to
        the file, hashed on its way, and fsynced on a thread while the caller goes on;
        :meth:`finish` raises what the sync raised.
        """
        import torch

        if owner is None:
            path = self._path(name)
            entry = _save_to(path, obj)
            self._submit(_relative(name), lambda: _synced(path, entry))
            return path
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        data = buffer.getbuffer()
        try:
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise CheckpointError(
                self.folder / name,
                f"cannot be saved: the state of {owner} holds objects that "
                f"torch.load(weights_only=True) refuses ({_first_line(exc)}); "
                "its state_dict() must return tensors, numbers, strings and containers",
            ) from exc
        return self.write_bytes(name, data)

    def save_tensors(self, name: str, tensors: dict[str, Any]) -> Path:
        """A dict of tensors as a safetensors file (``model.safetensors``).

        Written by safetensors' ``save_file``, straight from the tensors into the file (no
        copy of the whole state in memory first); fsynced and hashed on a thread while the
        caller goes on.
        """
        from safetensors import SafetensorError
        from safetensors.torch import save_file

        path = self._path(name)
        try:
            save_file(
                {k: v.detach().contiguous() for k, v in tensors.items()},
                path,
                metadata={"format": "pt"},
            )
        except SafetensorError as exc:
            # The library reports a failed write (a full disk) in its message only.
            code = _OS_ERROR.search(str(exc))
            cause = OSError(int(code[1]), os.strerror(int(code[1]))) if code else exc
            raise write_error(path, cause, "saved") from exc
        except OSError as exc:  # the library's own file could not be made (a folder locked)
            raise write_error(path, exc, "saved") from exc
        except (RuntimeError, ValueError) as exc:
            raise CheckpointError(
                path,
                f"cannot be saved as safetensors ({_first_line(exc)}); "
                "save_state(safe_serialization=False) writes pytorch_model.bin instead",
            ) from exc
        self._submit(_relative(name), lambda: entry_of(path))
        return path

    def _path(self, name: str) -> Path:
        path = self.folder / _relative(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(path.parent, exc, "created") from exc
        return path

    def record(self, name: str) -> None:
        """Record a file written into the folder (a library's, DCP's): synced and hashed by
        :meth:`finish`, listed in the manifest."""
        self._written.append(_relative(name))

    def record_tree(self, name: str) -> None:
        """:meth:`record` every file under the sub-folder ``name``."""
        root = self.folder / _relative(name)
        for dirpath, _, files in os.walk(root):
            for file in files:
                self.record((Path(dirpath) / file).relative_to(self.folder).as_posix())


class _Watched:
    """A file object that hashes what is written through it, and keeps the ``OSError`` a
    write raised: a library that turns it into its own error (torch's zip writer) would
    otherwise hide that the disk was full.

    Only for a writer that writes its bytes in order, once (``torch.save`` to an object
    without ``seek``): the hash is then the file's, taken while the bytes are at hand.
    ``on_first_write`` runs once, before the first byte is written (torch's zip writer has
    been made by then).
    """

    def __init__(self, fh: BinaryIO, on_first_write: Callable[[], None] | None = None) -> None:
        import xxhash

        self._fh = fh
        self._hash = xxhash.xxh3_64()
        self.size = 0
        self.error: OSError | None = None
        self._on_first_write = on_first_write

    def write(self, data: bytes | memoryview) -> int:
        first = self._on_first_write
        if first is not None:
            self._on_first_write = None
            first()
        try:
            written = self._fh.write(data)
        except OSError as exc:
            self.error = exc
            raise
        self._hash.update(data)
        self.size += memoryview(data).nbytes
        return written

    def entry(self) -> FileEntry:
        """What the manifest records of the bytes written so far."""
        return FileEntry(self.size, self._hash.intdigest())

    def flush(self) -> None:
        self._fh.flush()


# Held while torch's CRC-32 option is switched off for one zip writer's making (below).
_CRC_OPTION = threading.Lock()


def _save_to(path: Path, obj: Any) -> FileEntry:
    """``torch.save(obj)`` to ``path``, hashed as it is written; its entry (not synced yet).

    Written without the zip format's CRC-32 of each record: computing it is most of the time
    ``torch.save`` takes (0.15 s of 0.27 s for 200 MB), and the manifest's XXH3-64 of the
    whole file, checked before every load, already covers every byte. ``torch.load`` reads
    the file as any other (it does not check the CRCs); only a zip tool would flag them.
    Torch reads its option (a process-wide one) once, when it makes the writer, before the
    first byte is written: it is off only until then, under a lock, so a ``torch.save`` of
    the user's own on another thread still gets its CRCs, bar one made in that instant.
    """
    import torch

    watched: _Watched | None = None
    _CRC_OPTION.acquire()
    crc = torch.serialization.get_crc32_options()  # as the user left it
    held = True

    def restore() -> None:  # before the first byte is written, or on an error before it
        nonlocal held
        if held:
            held = False
            torch.serialization.set_crc32_options(crc)
            _CRC_OPTION.release()

    try:
        torch.serialization.set_crc32_options(False)
        with atomic_folders.open_new(path) as fh:
            watched = _Watched(fh, restore)
            # torch.save writes to any object with write and flush (its documented contract);
            # its annotation names only str, PathLike and IO[bytes].
            torch.save(obj, watched)  # type: ignore[arg-type]
    except Exception as exc:
        cause = watched.error if watched is not None and watched.error is not None else exc
        raise write_error(path, cause, "saved") from exc
    finally:
        restore()
    return watched.entry()


def _synced(path: Path, entry: FileEntry) -> FileEntry:
    """Fsync a file written and hashed on the caller's thread; its ``entry``."""
    sync_file(path)
    return entry


def sync_file(path: Path) -> None:
    """Fsync a file written whole and already hashed (a library's files recorded afterwards
    are synced and hashed by ``entry_of``)."""
    try:
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(path, exc) from exc


def _sync_all(
    folder: Path, recorded: list[str], hashed: dict[str, FileEntry]
) -> dict[str, FileEntry]:
    """Fsync each written file, hashing those ``recorded`` (a library's), two at a time (a
    sync waits on the disk, a hash on the CPU); every file's entry."""
    if not recorded and not hashed:
        return {}
    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="accelkw-fsync") as pool:
            entries = list(pool.map(entry_of, [folder / name for name in recorded]))
            list(pool.map(sync_file, [folder / name for name in hashed]))
    except RuntimeError:
        # The interpreter is exiting (see FolderWriter._submit): one after the other, here.
        entries = [entry_of(folder / name) for name in recorded]
        for name in hashed:
            sync_file(folder / name)
    return {**dict(zip(recorded, entries, strict=True)), **hashed}


class FolderReader:
    """Reads the files of one checkpoint, each checked against the manifest before use.

    ``manifest`` is ``None`` for a checkpoint written by Accelerate: its files are then checked
    by reading them whole. Nothing read here changes any object of the run.
    """

    def __init__(self, folder: Path, manifest: Manifest | None, state: RunState) -> None:
        self.folder = folder
        self.manifest = manifest
        self.rank = state.rank
        self.world_size = state.world_size
        self.is_main_process = state.is_main_process
        # The files already checked against the manifest: read again (the weights, read
        # once to check their keys and again to apply them), they are not hashed twice.
        self._checked: set[str] = set()

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds ``name`` (listed in the manifest, or present)."""
        name = _relative(name)
        if self.manifest is not None:
            return name in self.manifest.files or any(
                f.startswith(name + "/") for f in self.manifest.files
            )
        return (self.folder / name).exists()

    def read_bytes(self, name: str) -> bytes:
        """The bytes of ``name``, checked against the manifest."""
        path = self.verify(name)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise CheckpointError(path, f"cannot be read ({exc.strerror or exc})") from exc

    def load(self, name: str, **load_kwargs: Any) -> Any:
        """``torch.load(weights_only=True)`` of ``name``, on the CPU; errors name the file."""
        import torch

        from accelkw_core.runtime.checkpoints.random_states import numpy_safe_globals

        load_kwargs.setdefault("map_location", "cpu")
        load_kwargs["weights_only"] = True

        def read(path: Path) -> Any:
            with numpy_safe_globals():
                return torch.load(path, **load_kwargs)

        return self._read_checked(name, read, "is damaged or not a torch file")

    def load_tensors(self, name: str) -> dict[str, Any]:
        """The tensors of the safetensors file ``name``."""
        from safetensors.torch import load_file

        return self._read_checked(
            name, lambda path: dict(load_file(path)), "is damaged or not a safetensors file"
        )

    def tensor_specs(self, name: str) -> dict[str, tuple[tuple[int, ...], str]]:
        """The name, shape and dtype (safetensors' name: ``F32``) of each tensor of the
        safetensors file ``name``, read from its header: no tensor's data is read."""
        from safetensors import safe_open

        def read(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
            with safe_open(str(path), framework="pt") as fh:
                return {
                    key: (tuple(fh.get_slice(key).get_shape()), str(fh.get_slice(key).get_dtype()))
                    for key in fh.keys()  # noqa: SIM118 (a safe_open handle is not a dict)
                }

        return self._read_checked(name, read, "is damaged or not a safetensors file")

    def _read_checked(self, name: str, read: Callable[[Path], T], damaged: str) -> T:
        """``read(path)`` of ``name`` while a thread checks it against the manifest.

        Reading and hashing both stream the file out of the page cache, so they run side by
        side; the result is returned only once the check has passed (nothing is applied before
        the caller gets it), and a file that fails the check is reported as such even when the
        reading failed too.
        """
        name = _relative(name)
        path = self._inside(name)
        if self.manifest is None or name in self._checked:
            self.verify(name)
            check = None
        else:
            self.manifest.check_size(self.folder, name)
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkw-check")
            check = pool.submit(self.manifest.check_file, self.folder, name)
            pool.shutdown(wait=False)
        try:
            result = read(path)
        except Exception as exc:
            if check is not None:
                check.result()  # a damaged file's CheckpointError first: it says more
            raise CheckpointError(path, f"{damaged} ({_first_line(exc)})") from exc
        if check is not None:
            check.result()
            self._checked.add(name)
        return result

    def _inside(self, name: str) -> Path:
        """The path of ``name``, refused when it resolves outside the folder (a link out)."""
        path = self.folder / _relative(name)
        root = os.path.realpath(self.folder)
        real = os.path.realpath(path)
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise CheckpointError(
                path, f"is a link to {real}, outside the checkpoint folder: refused"
            )
        return path

    def verify(self, name: str) -> Path:
        """Check ``name`` against the manifest (size, then hash); returns its path.

        For a checkpoint without a manifest, only that it exists: reading it checks the rest.
        """
        name = _relative(name)
        path = self._inside(name)
        if self.manifest is not None:
            if name not in self._checked:
                self.manifest.check_file(self.folder, name)
                self._checked.add(name)
        elif not path.is_file():
            raise CheckpointError(path, "is missing")
        return path

    def verify_tree(self, name: str) -> Path:
        """Check every file under the sub-folder ``name`` (a DCP checkpoint); returns its path."""
        root = self._inside(name)
        if self.manifest is not None:
            names = [f for f in self.manifest.files if f.startswith(_relative(name) + "/")]
            if not names:
                raise CheckpointError(root, "is missing (the manifest lists no file under it)")
            for file in names:
                self._inside(file)
                self.manifest.check_file(self.folder, file)
        elif not root.is_dir():
            raise CheckpointError(root, "is missing")
        return root


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
