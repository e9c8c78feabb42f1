"""Each process's own part of a checkpoint, written by that process alone, never waiting.

A checkpoint of replicated state (one process, DDP) has a shared part, committed by the main
process on its own (:mod:`~accelkw_core.runtime.checkpoints.save`), and one part per process:
``random_states_<rank>.pkl`` (its generators, its loaders' positions, its step), Accelerate's
file. The committing process's own part is in its commit; every other process writes its part
here (with what its handlers write for it alone, a per-rank file), whenever it reaches
``save_state``, before or after that commit:

1. into the folder's *inbox*, ``.<name>.accelkw-parts/`` beside it: the files and their
   *record* (``accelkw_part_<rank>.json``: the save they belong to, each file's size and
   XXH3-64 hash), written and synced in a folder of their own, renamed into place whole;
2. then, when the folder is committed already with this save's identity, moved into it.

The committing process, once its commit is done, moves every part of its save found in the
inbox into the folder. Each side looks for the other's work after finishing its own, so a part
is moved in by one of them (or both: a move of a file already moved is skipped). A save is
identified by the run's step and how many saves of that folder this process made at that step
(:func:`save_identity`): the main process writes it in the manifest, every other process
computes the same one on its own, and a part whose record names another save is never read. A
kill at any instant leaves either no part, or a part whose record does not check out (read as
missing), never a wrong one. Torch is imported by the caller (the bytes come from it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

from accelkw_core.errors import CheckpointError
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.atomic_folders import FileEntry, fsync_dir, write_durably
from accelkw_core.runtime.checkpoints.manifest import Manifest, read_manifest

__all__ = [
    "INBOX_SUFFIX",
    "adopt",
    "begin_part",
    "inbox_of",
    "is_part_file",
    "part_file",
    "publish_part",
    "read_part",
    "record_file",
    "recorded_files",
    "save_identity",
]

INBOX_SUFFIX = ".accelkw-parts"
_PART = re.compile(r"random_states_\d+\.pkl|accelkw_part_\d+\.json")
_RECORD = re.compile(r"accelkw_part_\d+\.json")
_ENTRY = re.compile(r"rank(\d+)\.(.+)")


def save_identity(step: int, count: int) -> str:
    """The identity of a save: the run's ``step`` and how many saves of the same folder this
    process made before at that step (``count``); the same on every process that calls it."""
    return f"{step}-{count}"


def part_file(rank: int) -> str:
    """The name of process ``rank``'s part in a checkpoint (Accelerate's)."""
    return f"random_states_{rank}.pkl"


def record_file(rank: int) -> str:
    """The name of the record that says which save process ``rank``'s part belongs to."""
    return f"accelkw_part_{rank}.json"


def is_part_file(name: str) -> bool:
    """Whether ``name`` (relative to a checkpoint folder) is a process's random states or its
    part's record: a checkpoint owns them, so a new save of the folder replaces them."""
    return _PART.fullmatch(name) is not None


def inbox_of(final: Path) -> Path:
    """Where processes leave their parts of saves of ``final`` not committed yet."""
    return final.with_name(f".{final.name}{INBOX_SUFFIX}")


def _record(save: str, rank: int, entries: dict[str, FileEntry]) -> bytes:
    data = {
        "save": save,
        "rank": rank,
        "files": {
            name: {"size": e.size, "xxh3_64": f"{e.xxh3:016x}"}
            for name, e in sorted(entries.items())
        },
    }
    return json.dumps(data, indent=1).encode()


def begin_part(final: Path, rank: int) -> Path:
    """A new folder, in ``final``'s inbox, for process ``rank`` to write its part into.

    Raises :class:`CheckpointError` naming it when it cannot be made.
    """
    inbox = inbox_of(final)
    building = inbox / f".rank{rank}.{atomic_folders.new_token()}{atomic_folders.TMP_SUFFIX}"
    try:
        # With its parents: the committing process removes the inbox once it is empty.
        building.mkdir(parents=True)
    except OSError as exc:
        raise atomic_folders.write_error(building, exc, "created") from exc
    # This process's earlier parts still waiting for their commit are superseded (its saves
    # of one folder follow each other); so are the leftovers of one of its writes killed.
    for old in _entries_of(inbox, rank):
        if old != building:
            atomic_folders.remove_tree(old)
    return building


def publish_part(
    final: Path, save: str, rank: int, building: Path, entries: dict[str, FileEntry]
) -> None:
    """Record the part written (and synced) in ``building`` as process ``rank``'s of the save
    ``save``, put it in the inbox whole, and move it into ``final`` if that save is committed.

    Never waits for another process; raises :class:`CheckpointError` naming what failed.
    """
    inbox = building.parent
    entry = inbox / f"rank{rank}.{save}"
    try:
        write_durably(building / record_file(rank), _record(save, rank, entries))
        fsync_dir(building)
        os.rename(building, entry)
    except OSError as exc:
        atomic_folders.remove_tree(building)
        raise atomic_folders.write_error(entry, exc, "renamed into place") from exc
    except BaseException:
        atomic_folders.remove_tree(building)
        raise
    fsync_dir(inbox)
    if _committed_save(final) == save:
        # The folder removed meanwhile (total_limit, a newer save): the part goes with it.
        with contextlib.suppress(OSError, ValueError):
            _move_in(entry, final, rank)
        with contextlib.suppress(OSError):
            inbox.rmdir()  # only when empty


def adopt(final: Path, save: str) -> None:
    """Move into ``final`` (just committed as the save ``save``) every part of that save
    waiting in its inbox; best effort (a part left out is a warning at load, never wrong)."""
    inbox = inbox_of(final)
    try:
        found = sorted(inbox.iterdir()) if inbox.is_dir() else []
    except OSError:
        return
    for path in found:
        match = _ENTRY.fullmatch(path.name)
        if match and match[2] == save:
            with contextlib.suppress(OSError, ValueError):
                _move_in(path, final, int(match[1]))
    with contextlib.suppress(OSError):
        inbox.rmdir()  # only when empty: others' parts of later saves stay


def read_part(folder: Path, manifest: Manifest, rank: int) -> Manifest | None:
    """What process ``rank``'s part in ``folder`` holds (its files' sizes and hashes), when its
    record says it belongs to the save ``manifest`` records; ``None`` when it has none, or
    another save's."""
    if manifest.save is None:
        return None
    try:
        raw = json.loads((folder / record_file(rank)).read_bytes().decode("utf-8"))
        if raw.get("save") != manifest.save or raw.get("rank") != rank:
            return None
        files = {
            str(name): FileEntry(int(value["size"]), int(value["xxh3_64"], 16))
            for name, value in raw["files"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if part_file(rank) not in files:
        return None
    return Manifest(world_size=manifest.world_size, step=manifest.step, files=files)


def recorded_files(folder: Path) -> set[str]:
    """Every file the part records in ``folder`` list (whichever save they name)."""
    names: set[str] = set()
    try:
        records = [p for p in folder.iterdir() if _RECORD.fullmatch(p.name)]
    except OSError:
        return names
    for record in records:
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            names.update(str(n) for n in json.loads(record.read_bytes().decode())["files"])
    return names


def _committed_save(final: Path) -> str | None:
    try:
        manifest = read_manifest(final)
    except CheckpointError:
        return None
    return None if manifest is None else manifest.save


def _entries_of(inbox: Path, rank: int) -> list[Path]:
    prefix = f"rank{rank}."
    return [
        p for p in inbox.iterdir() if p.name.startswith(prefix) or p.name.startswith(f".{prefix}")
    ]


def _move_in(entry: Path, final: Path, rank: int) -> None:
    """Move a part's files, then its record, into ``final``; a file moved already is skipped.

    The record last: until it is there, the part reads as missing, never as another save's.
    """
    raw = json.loads((entry / record_file(rank)).read_bytes().decode("utf-8"))
    folders = {final}
    for name in sorted(raw.get("files", {})):
        target = final / name
        if target.parent != final:
            target.parent.mkdir(parents=True, exist_ok=True)
            folders.add(target.parent)
        with contextlib.suppress(FileNotFoundError):
            os.rename(entry / name, target)
    for folder in folders:
        fsync_dir(folder)
    with contextlib.suppress(FileNotFoundError):
        os.rename(entry / record_file(rank), final / record_file(rank))
    fsync_dir(final)
    with contextlib.suppress(OSError):
        shutil.rmtree(entry)
