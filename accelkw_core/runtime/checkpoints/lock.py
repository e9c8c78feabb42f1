"""One writer per checkpoint folder: a lock held for a save's whole life.

Two runs saving into one folder (a relaunched job whose old process still lives, two jobs given
the same ``project_dir``) would otherwise interleave their files or remove each other's temporary
folders. The save that commits holds an exclusive ``flock`` on ``.<name>.accelkw-lock`` beside
the folder from before it looks at anything there until after its commit; a second writer is
refused at once, in one line naming the holder (host and process id) and the folder. The lock
belongs to the open file, so the kernel lets it go when its process dies however it dies: a
lock file left behind by a killed save holds nobody.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from accelkw_core.errors import CheckpointError, CheckpointLockedError
from accelkw_core.runtime.checkpoints.atomic_folders import is_full, write_error

__all__ = ["LOCK_SUFFIX", "WriterLock", "is_held", "lock_of"]

LOCK_SUFFIX = ".accelkw-lock"


def lock_of(final: Path) -> Path:
    """The lock file of the checkpoint folder ``final``."""
    return final.with_name(f".{final.name}{LOCK_SUFFIX}")


def _holder_text(raw: bytes) -> str:
    try:
        data = json.loads(raw.decode("utf-8"))
        return f"host {data['host']}, pid {data['pid']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet"


class WriterLock:
    """The exclusive right to write the checkpoint folder ``final``.

    :meth:`acquire` raises :class:`CheckpointLockedError` at once when another process holds it;
    :meth:`release` gives it back and removes the lock file.
    """

    def __init__(self, final: Path) -> None:
        self.final = final
        self.path = lock_of(final)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`CheckpointLockedError` naming who holds it."""
        import fcntl

        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                if is_full(exc):
                    raise write_error(self.path, exc) from exc
                raise CheckpointError(
                    self.path.parent,
                    f"is not writable by this process ({exc.strerror or exc}): a save writes "
                    f"its lock, its temporary folder and {self.final.name} there; nothing "
                    "was written",
                ) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = _holder_text(os.pread(fd, 4096, 0))
                finally:
                    os.close(fd)
                raise CheckpointLockedError(self.final, holder) from None
            # The holder before us removes the file as it releases: the lock we got may be on
            # a file no longer under the name, which the next writer would not see. Retry then.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        who = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode()
        try:
            # Written, then cut to its length: a full disk fails the write, the first thing a
            # save writes, with the one-line error every later write of the save gives.
            os.pwrite(fd, who, 0)
            os.ftruncate(fd, len(who))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(fd)
            raise write_error(self.path, exc) from exc
        self._fd = fd

    def release(self) -> None:
        """Give the lock back (removing its file first, while still held); idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # A lock file that cannot be removed (its folder made read-only) holds nobody once
        # closed: releasing never raises, so a failed save's agreement is never skipped.
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(fd)


def is_held(final: Path) -> bool:
    """Whether a process (this one included, through another lock object) holds ``final``'s lock."""
    if not lock_of(final).exists():
        return False
    lock = WriterLock(final)
    try:
        lock.acquire()
    except CheckpointLockedError:
        return True
    lock.release()
    return False
