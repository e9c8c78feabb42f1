"""Durable files and folders: written, fsynced, and moved into place in one rename.

A checkpoint folder is built under a temporary name beside its final one and committed with
:func:`commit_folder`. Where the final folder already exists the two are exchanged atomically
(``renameat2(RENAME_EXCHANGE)`` on Linux); elsewhere the old folder is first renamed aside, and
:func:`recover` finishes or undoes a commit a crash interrupted between the two renames. At every
instant the final name holds either the previous complete folder or the new complete one, or
(only in the fallback's window) neither, with both complete folders beside it for ``recover``.

Torch-free: the bytes come from the caller.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

__all__ = [
    "OLD_SUFFIX",
    "TMP_SUFFIX",
    "EagerFile",
    "FileEntry",
    "aside_of",
    "checksum",
    "commit_folder",
    "entry_of",
    "fsync_dir",
    "mapped",
    "recover",
    "remove_tree",
    "stale_temporaries",
    "temporary_of",
    "write_durably",
]

TMP_SUFFIX = ".accelkw-tmp"
OLD_SUFFIX = ".accelkw-old"


class FileEntry(NamedTuple):
    """What the manifest records of one file: its size in bytes and its XXH3-64 hash."""

    size: int
    xxh3: int


def checksum(data: bytes | memoryview | mmap.mmap) -> int:
    """The XXH3-64 hash of ``data`` (xxHash's: several GB/s, so checking costs little)."""
    import xxhash

    return int(xxhash.xxh3_64_intdigest(data))


def temporary_of(final: Path) -> Path:
    """The folder a checkpoint for ``final`` is written into before it is committed."""
    return final.with_name(f".{final.name}{TMP_SUFFIX}")


def aside_of(final: Path) -> Path:
    """Where the fallback commit moves the previous ``final`` while the new one takes its name."""
    return final.with_name(f".{final.name}{OLD_SUFFIX}")


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s entries (names created, renamed or removed in it) to the disk."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # a platform that cannot open folders (Windows) keeps no such metadata
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes | memoryview) -> FileEntry:
    """Write ``data`` to ``path``, flushed and fsynced; returns what the manifest records."""
    view = memoryview(data).cast("B")
    with open(path, "wb") as fh:
        fh.write(view)
        fh.flush()
        os.fsync(fh.fileno())
    return FileEntry(len(view), checksum(view))


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[mmap.mmap | bytes]:
    """The bytes of ``path``, mapped read-only (no copy out of the page cache)."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            yield view


class EagerFile:
    """A file being written whose bytes the disk starts taking before the writer is done.

    Every ``step`` bytes, ``fdatasync`` runs on ``sync`` (a one-thread executor) while the
    writer goes on, so the final fsync waits for the tail only. ``torch.save`` writes to it as
    to any file object.
    """

    def __init__(self, fh: BinaryIO, sync: Executor, step: int = 32 * 2**20) -> None:
        self._fh = fh
        self._sync = sync
        self._step = step
        self._unsynced = 0
        self._flushing: Future[None] | None = None

    def write(self, data: bytes | memoryview) -> int:
        written = self._fh.write(data)
        self._unsynced += written
        if self._unsynced >= self._step and (self._flushing is None or self._flushing.done()):
            self._fh.flush()
            self._flushing = self._sync.submit(os.fdatasync, self._fh.fileno())
            self._unsynced = 0
        return written

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        """Wait for a data sync still running; the caller closes the file and fsyncs it."""
        self._fh.flush()
        if self._flushing is not None:
            self._flushing.result()


def entry_of(path: Path) -> FileEntry:
    """Size and hash of a file a library wrote itself (``torch.save``, safetensors), fsynced."""
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())
    with mapped(path) as view:
        return FileEntry(len(view), checksum(view))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2``); ``False`` if unsupported."""
    # Imported here: ctypes.util pulls in subprocess, and every plugin imports this module.
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if result == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (38, 22, 95):  # ENOSYS, EINVAL (filesystem without it), EOPNOTSUPP
        return False
    raise OSError(errno, os.strerror(errno), str(a), None, str(b))


def commit_folder(temporary: Path, final: Path) -> None:
    """Move the complete ``temporary`` folder to ``final``, replacing a previous ``final``.

    The previous folder is removed only once the new one holds the name.
    """
    fsync_dir(temporary)
    if final.exists():
        if _exchange(temporary, final):
            fsync_dir(final.parent)
            shutil.rmtree(temporary)
        else:
            aside = aside_of(final)
            if aside.exists():
                shutil.rmtree(aside)
            os.rename(final, aside)
            os.rename(temporary, final)
            fsync_dir(final.parent)
            shutil.rmtree(aside)
    else:
        os.rename(temporary, final)
    fsync_dir(final.parent)


def recover(final: Path, is_complete: Callable[[Path], bool]) -> str | None:
    """Finish or undo a fallback commit a crash interrupted; says what it did, or ``None``.

    ``is_complete`` tells a fully written folder (its manifest checks out) from a partial one.
    """
    aside = aside_of(final)
    if not aside.is_dir() or final.exists():
        if aside.is_dir() and final.exists():
            shutil.rmtree(aside)  # the commit had finished; only the removal was cut short
            return f"removed {aside.name}, left by a commit that had completed"
        return None
    temporary = temporary_of(final)
    if temporary.is_dir() and is_complete(temporary):
        os.rename(temporary, final)
        fsync_dir(final.parent)
        shutil.rmtree(aside)
        return f"completed the interrupted commit of {final.name}"
    os.rename(aside, final)
    fsync_dir(final.parent)
    return f"restored the previous {final.name}, the new one was incomplete"


def stale_temporaries(parent: Path) -> list[Path]:
    """Temporary folders left in ``parent`` by saves that never committed."""
    if not parent.is_dir():
        return []
    return sorted(
        p for p in parent.iterdir() if p.name.startswith(".") and p.name.endswith(TMP_SUFFIX)
    )


def remove_tree(path: Path) -> None:
    """Remove a folder tree, ignoring one that is already gone."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
