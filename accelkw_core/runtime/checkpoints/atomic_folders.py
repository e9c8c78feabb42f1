"""Durable files and folders: written, fsynced, and moved into place in one rename.

A checkpoint folder is built under a temporary name unique to its save (``.<name>.<token>`` with
:data:`TMP_SUFFIX`) beside its final one and committed with
:func:`commit_folder`. Where the final folder already exists the two are exchanged atomically
(``renameat2(RENAME_EXCHANGE)`` on Linux); elsewhere the old folder is first renamed aside, and
:func:`recover` finishes or undoes a commit a crash interrupted between the two renames. At every
instant the final name holds either the previous complete folder or the new complete one, or
(only in the fallback's window) neither, with both complete folders beside it for ``recover``.

Torch-free: the bytes come from the caller.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import mmap
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from accelkw_core.errors import CheckpointError

__all__ = [
    "OLD_SUFFIX",
    "TMP_SUFFIX",
    "FileEntry",
    "aside_of",
    "checksum",
    "commit_folder",
    "entry_of",
    "fsync_dir",
    "fsync_tree",
    "hashed",
    "keep_others",
    "mapped",
    "new_token",
    "open_new",
    "owner_of",
    "recover",
    "remove_tree",
    "save_target",
    "stale_temporaries",
    "temporaries_of",
    "temporary_of",
    "write_durably",
    "write_error",
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


def new_token() -> str:
    """A name part unique to one save: two saves never share (or remove) a temporary folder."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def save_target(folder: Path) -> Path:
    """``folder`` as a save names it; refused, in one line, where a save cannot replace it.

    A save builds the new folder beside the final one and renames it into place, replacing
    the old folder whole: the root of the file system has no name to build beside, and the
    working directory (``"."``) or a folder holding it would be moved out from under the
    process. A name ending in ``..`` is returned as the absolute folder it stands for.
    """
    absolute = Path(os.path.abspath(folder))
    if not absolute.name:
        raise CheckpointError(
            folder,
            "is the root of the file system: save_state writes a checkpoint as a folder it "
            "renames into place, and the root cannot be; save into a sub-folder",
        )
    cwd = Path(os.getcwd())
    if absolute == cwd or absolute in cwd.parents:
        what = "the working directory" if absolute == cwd else f"a folder holding {cwd}"
        raise CheckpointError(
            folder,
            f"is {what}: save_state replaces its folder whole, which would move the working "
            "directory out from under this process; save into a sub-folder, e.g. "
            f"{os.path.join(os.fspath(folder), 'checkpoint')!r}",
        )
    return absolute if folder.name in ("", "..") else folder


def temporary_of(final: Path, token: str) -> Path:
    """The folder the save ``token`` writes a checkpoint for ``final`` into before its commit."""
    return final.with_name(f".{final.name}.{token}{TMP_SUFFIX}")


def owner_of(temporary: Path) -> str | None:
    """The name of the checkpoint folder ``temporary`` was written for; ``None`` if not ours.

    ``.<final>.<token>.accelkw-tmp``, or ``.<final>.accelkw-tmp`` as accelkw 0.2 named them.
    """
    name = temporary.name
    if not (name.startswith(".") and name.endswith(TMP_SUFFIX)):
        return None
    stem = name[1 : -len(TMP_SUFFIX)]
    final, dot, token = stem.rpartition(".")
    if dot and final and token and "-" in token and token.replace("-", "").isalnum():
        return final
    return stem or None


def temporaries_of(final: Path) -> list[Path]:
    """The temporary folders of every save of ``final`` that never committed (oldest first)."""
    parent = final.parent
    if not parent.is_dir():
        return []
    found = [p for p in parent.iterdir() if owner_of(p) == final.name and _is_folder(p)]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def open_new(path: Path) -> BinaryIO:
    """Open ``path`` to write a file of a checkpoint (every file of a save is opened here)."""
    return open(path, "wb")


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full (no space left, or the quota reached)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def write_error(path: Path, exc: BaseException, doing: str = "written") -> CheckpointError:
    """The one-line error for a failed write of ``path`` (a full disk says so in words).

    Its ``__cause__`` is ``exc``, for an error kept to be raised later; raise it ``from exc``.
    """
    if isinstance(exc, CheckpointError):
        return exc
    if isinstance(exc, OSError) and is_full(exc):
        what = "no space left on the device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        error = CheckpointError(path, f"cannot be {doing}: {what}")
    else:
        text = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        error = CheckpointError(path, f"cannot be {doing} ({detail})")
    error.__cause__ = exc
    return error


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
    try:
        with open_new(path) as fh:
            fh.write(view)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(path, exc) from exc
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


#: How much of a file :func:`hashed` maps at a time.
_WINDOW = 8 << 20


def hashed(path: Path) -> FileEntry:
    """Size and XXH3-64 hash of the file ``path``, read in windows of its mapping.

    Each window is let go once hashed (``MADV_DONTNEED``: the pages stay in the page cache,
    out of this process's resident memory), so checking a file of any size costs no more
    memory than one window: a load checks every file while it holds the state it reads.
    """
    import xxhash

    digest = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return FileEntry(0, int(digest.intdigest()))
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            release = getattr(mmap, "MADV_DONTNEED", None)
            for start in range(0, size, _WINDOW):
                stop = min(start + _WINDOW, size)
                with memoryview(view)[start:stop] as window:
                    digest.update(window)
                if release is not None:
                    view.madvise(release, start, stop - start)
    return FileEntry(size, int(digest.intdigest()))


def entry_of(path: Path) -> FileEntry:
    """Size and hash of a written file, fsynced (its data on the disk before the commit)."""
    try:
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
        return hashed(path)
    except OSError as exc:
        raise write_error(path, exc) from exc


def fsync_tree(root: Path) -> None:
    """Fsync every folder under ``root``, deepest first, then ``root``: the names of its files
    and sub-folders (a library's, DCP's) are on the disk before the commit names it."""
    folders = [Path(dirpath) for dirpath, _, _ in os.walk(root)]
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(folder)


def keep_others(previous: Path, new: Path, owned: Callable[[str], bool]) -> list[str]:
    """Link into ``new`` every file of ``previous`` that ``owned`` does not claim; their names.

    ``owned(name)`` (a path relative to the folder, ``/``-separated) says whether the previous
    checkpoint wrote ``name``: those the commit replaces or drops. Every other file (a user's
    ``best_model.pt``, ``notes.txt``, a folder of logs) is hard-linked into the new folder
    before the commit, so the final name holds it at every instant, unchanged (the same file,
    not a copy); where the file system refuses hard links it is copied and fsynced. A claimed
    folder is skipped whole; an empty unclaimed one is made again. A file the new checkpoint
    also writes is refused naming it, before the folder is changed: it is the user's, and
    replacing it would lose it.
    """
    kept: list[str] = []
    for dirpath, dirnames, filenames in os.walk(previous):
        here = Path(dirpath)
        base = here.relative_to(previous)
        folders = []
        for name in sorted(dirnames):
            rel = (base / name).as_posix()
            if owned(rel):
                continue
            if (here / name).is_symlink():
                filenames.append(name)  # a link to a folder is kept as the link it is
            else:
                folders.append(name)
        dirnames[:] = folders
        if not dirnames and not filenames and base.parts and not owned(base.as_posix()):
            _keep_one(here, new / base, base.as_posix(), folder=True)
            kept.append(base.as_posix() + "/")
        for name in sorted(filenames):
            rel = (base / name).as_posix()
            if not owned(rel):
                _keep_one(here / name, new / rel, rel, folder=False)
                kept.append(rel)
    return kept


def _keep_one(source: Path, target: Path, name: str, *, folder: bool) -> None:
    if os.path.lexists(target) and not (folder and target.is_dir()):
        raise CheckpointError(
            source,
            "is not part of the checkpoint saved there (its manifest does not list it), and "
            f"the new checkpoint writes {name} too: move the file, or save into another "
            "folder; nothing was changed",
        )
    try:
        if folder:
            target.mkdir(parents=True, exist_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
                raise
            shutil.copy2(source, target, follow_symlinks=False)
            if not target.is_symlink():
                with open(target, "rb+") as fh:
                    os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(target, exc, "kept in the new checkpoint") from exc


# renameat2's arguments (linux/fcntl.h, linux/fs.h): paths relative to the working folder, and
# the flag that swaps two existing names.
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# What renameat2 answers where the swap is not to be had: a kernel or C library without the
# call, or a file system without the flag. The fallback commit then renames in two steps.
_NO_EXCHANGE = frozenset({errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """The C library's ``renameat2``, looked up once per process; ``None`` off Linux or where the
    C library lacks it (glibc before 2.28, some others)."""
    if not sys.platform.startswith("linux"):
        return None
    # Imported here: ctypes is only needed for a commit over an existing folder. CDLL(None) is
    # the symbols the process has loaded already, the C library among them: no search of the
    # library path, no subprocess (ctypes.util.find_library runs ldconfig).
    import ctypes

    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    return function


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2``); ``False`` if unsupported."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    import ctypes

    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def commit_folder(temporary: Path, final: Path, owned: Callable[[str], bool] | None = None) -> None:
    """Move the complete ``temporary`` folder to ``final``, replacing a previous ``final``.

    The previous folder is removed only once the new one holds the name; a removal that fails
    then leaves it under a temporary name (the next save sweeps it), as the commit is done.
    ``owned`` (as :func:`keep_others` takes it): a file a user wrote into the previous folder
    after :func:`keep_others` linked the others (while a background save committed), which the
    previous checkpoint does not claim, is moved into the new folder before the previous one
    is removed, so it is never removed with it.
    """
    fsync_tree(temporary)
    if final.exists():
        if _exchange(temporary, final):
            fsync_dir(final.parent)
            # ``temporary`` is now the previous checkpoint.
            if _bring_late_files(temporary, final, owned):
                _remove_quietly(temporary)
        else:
            aside = aside_of(final)
            if aside.exists():
                shutil.rmtree(aside)
            os.rename(final, aside)
            os.rename(temporary, final)
            fsync_dir(final.parent)
            if _bring_late_files(aside, final, owned):
                _remove_quietly(aside)
    else:
        os.rename(temporary, final)
    fsync_dir(final.parent)


def _bring_late_files(previous: Path, final: Path, owned: Callable[[str], bool] | None) -> bool:
    """Move into ``final`` each file of ``previous`` that neither its checkpoint owns nor
    ``final`` holds: written there after the others were kept. The commit is done whatever
    happens here: ``False`` when a file could not be moved, and ``previous`` (the file in it)
    is then left where it is rather than removed."""
    if owned is None:
        return True
    moved, whole = False, True
    for dirpath, dirnames, filenames in os.walk(previous):
        here = Path(dirpath)
        base = here.relative_to(previous)
        dirnames[:] = [d for d in dirnames if not owned((base / d).as_posix())]
        for name in filenames:
            rel = (base / name).as_posix()
            target = final / rel
            if owned(rel) or os.path.lexists(target):
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(here / name, target)
                moved = True
            except OSError:
                whole = False
    if moved:
        fsync_tree(final)
    return whole


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(path)


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
    complete = [t for t in temporaries_of(final) if is_complete(t)]
    if complete:
        os.rename(complete[-1], final)
        fsync_dir(final.parent)
        shutil.rmtree(aside)
        return f"completed the interrupted commit of {final.name}"
    os.rename(aside, final)
    fsync_dir(final.parent)
    return f"restored the previous {final.name}, the new one was incomplete"


def stale_temporaries(parent: Path) -> list[Path]:
    """Temporary folders in ``parent`` (folders only, never files or links), by name.

    Which of them are stale is the caller's question: one whose save still holds its folder's
    lock is live (:mod:`accelkw_core.runtime.checkpoints.lock`).
    """
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if owner_of(p) is not None and _is_folder(p))


def remove_tree(path: Path) -> None:
    """Remove a folder tree, ignoring one that is already gone."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
