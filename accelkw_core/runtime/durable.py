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
import ctypes
import ctypes.util
import os
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "OLD_SUFFIX",
    "TMP_SUFFIX",
    "FileEntry",
    "aside_of",
    "checksum",
    "commit_folder",
    "entry_of",
    "fsync_dir",
    "fsync_file",
    "recover",
    "remove_tree",
    "stale_temporaries",
    "temporary_of",
    "write_durably",
]

TMP_SUFFIX = ".accelkw-tmp"
OLD_SUFFIX = ".accelkw-old"
_CHUNK = 16 * 2**20


class FileEntry(NamedTuple):
    """What the manifest records of one file: its size in bytes and its CRC-32."""

    size: int
    crc32: int


def checksum(data: bytes | memoryview, start: int = 0) -> int:
    """The CRC-32 of ``data`` (zlib's, as zip files use), continuing from ``start``."""
    return zlib.crc32(data, start)


def temporary_of(final: Path) -> Path:
    """The folder a checkpoint for ``final`` is written into before it is committed."""
    return final.with_name(f".{final.name}{TMP_SUFFIX}")


def aside_of(final: Path) -> Path:
    """Where the fallback commit moves the previous ``final`` while the new one takes its name."""
    return final.with_name(f".{final.name}{OLD_SUFFIX}")


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    crc = 0
    with open(path, "wb") as fh:
        for start in range(0, len(view), _CHUNK):
            chunk = view[start : start + _CHUNK]
            fh.write(chunk)
            crc = zlib.crc32(chunk, crc)
        fh.flush()
        os.fsync(fh.fileno())
    return FileEntry(len(view), crc)


def entry_of(path: Path) -> FileEntry:
    """Size and CRC-32 of a file already on disk (one written by a library), after an fsync."""
    crc = 0
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
        os.fsync(fh.fileno())
    return FileEntry(size, crc)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2``); ``False`` if unsupported."""
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
