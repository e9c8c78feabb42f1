"""The manifest of a checkpoint folder: what it holds, written last, checked before any load.

``accelkw_checkpoint.json`` lists every file of the checkpoint (path relative to the folder, size,
XXH3-64 hash), the accelkw version and world size that wrote it, the step, the keys of the
handlers whose state it holds and the distributions that shipped them, and (format 2) the
identity of the save, which each process's own part, written beside the shared ones by that
process, must name (:mod:`~accelkw_core.runtime.checkpoints.parts`). A folder without one was
written by Accelerate (or by accelkw before 0.3); a folder whose manifest does not match its
files is damaged. Torch-free.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelkw_core._version import __version__
from accelkw_core.errors import CheckpointError
from accelkw_core.runtime.checkpoints.atomic_folders import (
    FileEntry,
    checksum,
    hashed,
    write_durably,
)

__all__ = ["FORMAT", "MANIFEST", "Manifest", "read_manifest"]

MANIFEST = "accelkw_checkpoint.json"
#: 2: the processes' own parts are no longer listed (each has its record), and ``save`` is set.
FORMAT = 2


@dataclass
class Manifest:
    """What a checkpoint holds; :meth:`check` tells whether a file's bytes are the ones saved."""

    world_size: int
    step: int = 0
    handlers: list[str] = field(default_factory=list)
    #: The distribution of each saved handler that came from one (key -> distribution name).
    distributions: dict[str, str] = field(default_factory=dict)
    files: dict[str, FileEntry] = field(default_factory=dict)
    #: The identity of the save (its step and count), which the processes' parts name.
    save: str | None = None
    version: str = __version__
    format: int = FORMAT

    def write(self, folder: Path) -> None:
        """Write the manifest into ``folder``, fsynced (the last file of a checkpoint)."""
        data = {
            "format": self.format,
            "accelkw": self.version,
            "world_size": self.world_size,
            "step": self.step,
            **({} if self.save is None else {"save": self.save}),
            "handlers": sorted(self.handlers),
            "distributions": dict(sorted(self.distributions.items())),
            "files": {
                name: {"size": e.size, "xxh3_64": f"{e.xxh3:016x}"}
                for name, e in sorted(self.files.items())
            },
        }
        write_durably(folder / MANIFEST, json.dumps(data, indent=1).encode())

    def entry(self, folder: Path, name: str) -> FileEntry:
        """The record of ``name``; a :class:`CheckpointError` when the manifest lacks it."""
        entry = self.files.get(name)
        if entry is None:
            raise CheckpointError(folder / name, "is not listed in the checkpoint's manifest")
        return entry

    def check(self, folder: Path, name: str, data: bytes | memoryview | mmap.mmap) -> None:
        """Raise :class:`CheckpointError` unless ``data`` is what was saved as ``name``."""
        entry = self.entry(folder, name)
        self._check_size(folder, name, len(data), entry)
        if checksum(data) != entry.xxh3:
            raise CheckpointError(
                folder / name, "is corrupted: its hash differs from the manifest's"
            )

    def check_size(self, folder: Path, name: str) -> None:
        """Raise :class:`CheckpointError` unless ``folder / name`` is there, of the saved size."""
        entry = self.entry(folder, name)
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise _unreadable(path, exc) from exc
        self._check_size(folder, name, size, entry)

    def check_file(self, folder: Path, name: str) -> None:
        """:meth:`check` the file ``folder / name`` on disk (its size first, read in windows)."""
        self.check_size(folder, name)
        path = folder / name
        try:
            found, saved = hashed(path), self.entry(folder, name)
            self._check_size(folder, name, found.size, saved)
            if found.xxh3 != saved.xxh3:
                raise CheckpointError(
                    folder / name, "is corrupted: its hash differs from the manifest's"
                )
        except CheckpointError:
            raise  # an OSError too: it already says what is wrong
        except OSError as exc:
            raise _unreadable(path, exc) from exc

    @staticmethod
    def _check_size(folder: Path, name: str, size: int, entry: FileEntry) -> None:
        if size != entry.size:
            what = "truncated" if size < entry.size else "longer than saved"
            raise CheckpointError(
                folder / name, f"is {what}: {size} bytes, the manifest says {entry.size}"
            )

    def missing(self, folder: Path) -> list[str]:
        """The listed files that are not in ``folder``."""
        return [name for name in sorted(self.files) if not (folder / name).is_file()]


def _unreadable(path: Path, exc: OSError) -> CheckpointError:
    if isinstance(exc, FileNotFoundError):
        return CheckpointError(path, "is missing")
    return CheckpointError(path, f"cannot be read ({exc.strerror or exc})")


def _entries(raw: Any, path: Path) -> dict[str, FileEntry]:
    if not isinstance(raw, Mapping):
        raise CheckpointError(path, "is damaged: not a valid manifest ('files' is not a table)")
    entries: dict[str, FileEntry] = {}
    for name, value in raw.items():
        try:
            entries[str(name)] = FileEntry(int(value["size"]), int(value["xxh3_64"], 16))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                path, f"is damaged: not a valid manifest (entry {name!r} lacks size or xxh3_64)"
            ) from exc
    return entries


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest of ``folder``; ``None`` when it has none (a checkpoint from Accelerate)."""
    path = folder / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    try:
        raw = json.loads(data.decode("utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        fmt = int(raw.get("format", 0))
    except (ValueError, TypeError) as exc:
        # A UnicodeDecodeError is a ValueError: a manifest of random bytes lands here too.
        raise CheckpointError(path, f"is damaged: not a valid manifest ({_short(exc)})") from exc
    if fmt > FORMAT:
        raise CheckpointError(
            path,
            f"has format {fmt}, newer than this accelkw reads ({FORMAT}): "
            f"it was written by accelkw {raw.get('accelkw')}; upgrade accelkw-core",
        )
    try:
        return Manifest(
            world_size=int(raw.get("world_size", 1)),
            step=int(raw.get("step", 0)),
            handlers=[str(h) for h in raw.get("handlers", [])],
            distributions={str(k): str(v) for k, v in dict(raw.get("distributions", {})).items()},
            files=_entries(raw.get("files", {}), path),
            save=None if raw.get("save") is None else str(raw["save"]),
            version=str(raw.get("accelkw", "?")),
            format=fmt,
        )
    except (ValueError, TypeError) as exc:
        raise CheckpointError(path, f"is damaged: not a valid manifest ({_short(exc)})") from exc


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:160] if lines else type(exc).__name__
