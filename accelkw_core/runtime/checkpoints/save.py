"""``save_state``'s protocol: a checkpoint folder appears whole or not at all.

The process that commits (the main one; each machine's first with ``save_on_each_node``) takes
the folder's writer lock (:mod:`~accelkw_core.runtime.checkpoints.lock`), follows a link to the
folder it names, checks that the folder can be replaced, finishes or undoes a commit a crash
cut short, removes the temporaries of saves whose process is gone, and makes a temporary folder
of a name unique to this save, writes its files there (written, then synced), writes the
manifest and moves the folder into place (:mod:`~accelkw_core.runtime.checkpoints.atomic_folders`).

Replicated state (one process, DDP) is saved without any collective (``collective=False``): the
committing process writes the shared part and its own random states and commits on its own;
every other process writes only its own part, whenever it calls
(:func:`write_own_part`, :mod:`~accelkw_core.runtime.checkpoints.parts`). No process waits for
another, and a failure is raised by the process it happened on.

Sharded state is a collective (``collective=True``), as in Accelerate: every process writes its
files into the committing process's temporary folder, and the processes agree that every write
succeeded and on the commit; a failure at any stage, on any process, is raised by every process
at once, the temporary folder is removed and the previous checkpoint is left as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.contributions import CheckpointOwner
from accelkw_core.contract.points import CHECKPOINT, MODEL_CHECKPOINT, MODEL_STATE
from accelkw_core.errors import CheckpointError
from accelkw_core.runtime.checkpoints import atomic_folders, parts
from accelkw_core.runtime.checkpoints.agreement import (
    agree,
    alone,
    exchange,
    failures,
    node_of,
    raise_agreed,
)
from accelkw_core.runtime.checkpoints.aliases import without_aliases
from accelkw_core.runtime.checkpoints.folder_io import FolderWriter
from accelkw_core.runtime.checkpoints.layout import (
    MODEL,
    SAFE_MODEL,
    Checkpointed,
    numbered,
)
from accelkw_core.runtime.checkpoints.lock import WriterLock, is_held
from accelkw_core.runtime.checkpoints.manifest import MANIFEST, Manifest, read_manifest
from accelkw_core.runtime.checkpoints.project import is_complete
from accelkw_core.runtime.checkpoints.random_states import random_states
from accelkw_core.runtime.checkpoints.staging import StagingWriter

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

#: ``hook(models, weights, output_dir)``: Accelerate's ``register_save_state_pre_hook``.
SaveStateHook = Callable[[list[Any], list[Any], str], None]

__all__ = [
    "PendingSave",
    "SaveStateHook",
    "begin_save",
    "committer",
    "model_state_dict",
    "recover_commit",
    "run_save_hooks",
    "target_of",
    "write_own_part",
]


def model_state_dict(state: RunState, model: Any, unwrapped: Any) -> dict[str, Any]:
    """``model``'s weights through the ``model_state`` contribution, else ``unwrapped.state_dict()``."""
    contributed = state.values(MODEL_STATE)
    if contributed:
        return dict(contributed[0].state_dict(model))
    return dict(unwrapped.state_dict())


def committer(state: RunState, on_each_node: bool) -> bool:
    """Whether this process commits the shared part: the main process, or with
    ``save_on_each_node`` each machine's local main."""
    return state.local_rank == 0 if on_each_node else state.is_main_process


def _written(folder: Path) -> bool:
    """Whether a temporary folder of ours was written whole (its manifest checks out)."""
    return is_complete(folder, manifest_required=True)


def recover_commit(folder: Path) -> str | None:
    """Finish or undo a commit of ``folder`` a crash cut short; what it did, or ``None``."""
    return atomic_folders.recover(folder, _written)


def target_of(folder: Path) -> Path:
    """The folder a save of ``folder`` writes: the one a link names, never the link itself.

    A link is left as it is (a run's ``ckpt -> /scratch/ckpt`` keeps pointing there); the new
    checkpoint replaces the folder it points to, beside which its temporary folder is made.
    """
    if folder.is_symlink():
        return Path(os.path.realpath(folder))
    return folder


def _check_replaceable(folder: Path) -> None:
    """Refuse, before anything is written, a folder this process could not replace."""
    parent = folder.parent
    if not os.access(parent, os.W_OK | os.X_OK, effective_ids=True):
        raise CheckpointError(
            parent,
            "is not writable by this process: save_state writes a new folder beside "
            f"{folder.name} and renames it into place; nothing was written",
        )
    if not folder.exists():
        return
    for dirpath, _, _ in os.walk(folder):
        if not os.access(dirpath, os.W_OK | os.X_OK, effective_ids=True):
            raise CheckpointError(
                folder,
                f"cannot be replaced: {dirpath} is not writable by this process, so the "
                "previous checkpoint could not be removed; nothing was written",
            )


def _sweep(folder: Path) -> list[str]:
    """Remove the temporaries of saves that died; a live save's (its lock held) is left alone."""
    notes = []
    for stale in atomic_folders.stale_temporaries(folder.parent):
        owner = atomic_folders.owner_of(stale)
        # Ours are stale: this process holds our lock and has not made its temporary yet.
        if owner is None or (owner != folder.name and is_held(folder.with_name(owner))):
            continue
        try:
            atomic_folders.remove_tree(stale)
        except OSError as exc:
            # It holds no checkpoint: left there, it stands in no save's way.
            notes.append(f"could not remove {stale.name}, left by a save that failed ({exc})")
            continue
        notes.append(f"removed {stale.name}, left by a save that was interrupted")
    return notes


def _discard(temporary: Path) -> None:
    """Remove the temporary folder of a failed save, on a best-effort basis.

    Called before the processes agree on the failure: a removal that fails too must not make
    this process raise something else, or skip the agreement. The next save sweeps what is
    left (it holds no checkpoint under a final name).
    """
    with contextlib.suppress(OSError):
        atomic_folders.remove_tree(temporary)


def _prepare_target(folder: Path) -> list[str]:
    """Make ``folder``'s name ready for a new checkpoint; what it found, for warnings."""
    notes = []
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(folder, "is a file, not a folder: save_state writes a folder")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise atomic_folders.write_error(folder.parent, exc, "created") from exc
    _check_replaceable(folder)
    recovered = recover_commit(folder)
    if recovered:
        notes.append(recovered)
    notes += _sweep(folder)
    return notes


def _distributions(state: RunState, keys: Sequence[str]) -> dict[str, str]:
    """The distribution that shipped each saved handler state (by its key), where one did: a
    load without it installed names what to install."""
    wanted = set(keys)
    return {
        str(c.key): dist
        for c in state.contributions(CHECKPOINT)
        if c.key in wanted and (dist := state.distributions.get(c.handler))
    }


def _owned(folder: Path, written: Collection[str]) -> Callable[[str], bool]:
    """Which names in ``folder`` its previous checkpoint wrote: the ones a new save replaces.

    With a manifest, the files it lists; without one (a folder Accelerate wrote), the names of
    its layout that this save writes again. Everything else in the folder is the user's.
    """
    try:
        manifest = read_manifest(folder)
    except CheckpointError:
        manifest = None  # damaged: claim no more than for a folder without one
    if manifest is not None:
        listed = set(manifest.files) | {MANIFEST} | parts.recorded_files(folder)
        # Every process's part and its record are the checkpoint's too (not listed: each
        # process wrote its own); a new save's parts replace them.
        return lambda name: name in listed or parts.is_part_file(name)
    tops = {name.split("/", 1)[0] for name in written} | {MANIFEST}
    return lambda name: name.split("/", 1)[0] in tops or parts.is_part_file(name)


def _write_states(
    writer: FolderWriter,
    state: RunState,
    what: Checkpointed,
    weights: Sequence[dict[str, Any]],
    *,
    safe: bool,
    shared: bool,
) -> list[str]:
    """Write this process's part of the checkpoint; returns the handler keys saved."""
    keyed = state.keyed(CHECKPOINT)
    store = state.values(MODEL_CHECKPOINT)
    if store:
        store[0].save_checkpoint(writer, what.models, what.optimizers)
    if shared:
        if not store:
            # The optimizers first: their state is the largest, and the disk takes it while
            # the rest is written.
            for i, optimizer in enumerate(what.optimizers):
                writer.save(numbered("optimizer.bin", i), optimizer.state_dict())
            for i, model_weights in enumerate(weights):
                if safe:
                    writer.save_tensors(numbered(SAFE_MODEL, i), without_aliases(model_weights))
                else:
                    writer.save(numbered(MODEL, i), model_weights)
        for i, scheduler in enumerate(what.schedulers):
            writer.save(
                numbered("scheduler.bin", i), scheduler.state_dict(), owner=f"scheduler {i}"
            )
        for i, obj in enumerate(what.custom):
            writer.save(
                f"custom_checkpoint_{i}.pkl",
                obj.state_dict(),
                owner=f"registered object {i} ({type(obj).__name__})",
            )
    for key, obj in keyed.items():
        if isinstance(obj, CheckpointOwner):
            obj.save_checkpoint(writer)
        elif shared:
            writer.save(f"{key}.pt", obj.state_dict(), owner=f"handler {key!r}")
    writer.save(f"random_states_{state.rank}.pkl", random_states(what.data_loaders, what.step))
    return sorted(keyed)


def _start(
    target: Path, lock: WriterLock | None
) -> tuple[Path | None, list[str], BaseException | None]:
    """On a committing process: lock, prepare and make the temporary folder."""
    if lock is None:
        return None, [], None
    try:
        lock.acquire()
        notes = _prepare_target(target)
        temporary = atomic_folders.temporary_of(target, atomic_folders.new_token())
        try:
            temporary.mkdir()
        except OSError as exc:
            raise atomic_folders.write_error(temporary, exc, "created") from exc
        return temporary, notes, None
    except BaseException as exc:
        return None, [], exc


def _shared_temporary(state: RunState, mine: Path | None, error: BaseException | None) -> Path:
    """The temporary folder this process writes into: its machine's committer's."""
    report = (node_of(state), None if mine is None else str(mine), str(error) if error else None)
    reports = exchange(state, report)
    raise_agreed(error, [(rank, msg) for rank, (_, _, msg) in enumerate(reports) if msg])
    node = node_of(state)
    for where, path, _ in reports:
        if path is not None and where == node:
            return Path(path)
    for _, path, _ in reports:  # one committer for every machine (a shared file system)
        if path is not None:
            return Path(path)
    raise CheckpointError("save_state", "no process made the temporary folder")


def begin_save(
    state: RunState,
    folder: Path,
    what: Checkpointed,
    weights: Sequence[dict[str, Any]],
    *,
    safe_serialization: bool = True,
    save_on_each_node: bool = False,
    staged: bool = False,
    group: Any = None,
    hooks: Sequence[SaveStateHook] = (),
    collective: bool = True,
    save: str | None = None,
) -> PendingSave:
    """Begin a save of ``folder``: lock, prepare, and write (or stage), on the caller's thread.

    ``begin_save(...).complete()`` is a whole save: ``folder`` replaced only once the new
    checkpoint is complete; :attr:`PendingSave.notes` says what was cleaned up (stale
    temporaries, an interrupted commit).

    With ``staged``, the files are not written yet: every state is copied
    (:class:`~accelkw_core.runtime.checkpoints.staging.StagingWriter`) and the processes agree
    that staging succeeded (a state torch would refuse fails here, on every process).
    :meth:`PendingSave.complete` does the rest, on any thread; ``group`` is the process group
    it will agree on, given to the contributions (``FolderWriter.group``) for the
    collectives of writes they go on with in the background.

    ``hooks`` (``register_save_state_pre_hook``'s) are called first, on every process, with the
    models as they were given to ``prepare``, a list of their ``weights`` (a hook pops those it
    saves its own way) and the temporary folder: what they write there is part of the
    checkpoint, listed in its manifest and committed with the rest.

    ``collective=False`` (replicated state): called on a committing process only, which saves
    on its own, agreeing with no one; ``save`` is the save's identity, recorded in the manifest
    for the other processes' parts (:mod:`~accelkw_core.runtime.checkpoints.parts`).
    """
    with contextlib.nullcontext() if collective else alone():
        return _begin_save(
            state,
            folder,
            what,
            weights,
            safe_serialization=safe_serialization,
            save_on_each_node=save_on_each_node,
            staged=staged,
            group=group,
            hooks=hooks,
            collective=collective,
            save=save,
        )


def _begin_save(
    state: RunState,
    folder: Path,
    what: Checkpointed,
    weights: Sequence[dict[str, Any]],
    *,
    safe_serialization: bool,
    save_on_each_node: bool,
    staged: bool,
    group: Any,
    hooks: Sequence[SaveStateHook],
    collective: bool,
    save: str | None,
) -> PendingSave:
    committing = committer(state, save_on_each_node) or not collective
    # The lock is the folder's a link points to: two links to one folder share its writer.
    target = target_of(folder) if committing else folder
    lock = WriterLock(target) if committing else None
    try:
        mine, notes, error = _start(target, lock)
        temporary = _shared_temporary(state, mine, error)
        writer = (
            StagingWriter(temporary, state, group) if staged else FolderWriter(temporary, state)
        )
        handlers: list[str] = []
        try:
            weights = list(weights)
            run_save_hooks(hooks, list(what.given), weights, temporary)
            handlers = _write_states(
                writer, state, what, weights, safe=safe_serialization, shared=committing
            )
            if isinstance(writer, StagingWriter):
                writer.settle()
        except BaseException as exc:
            error = exc
        if staged:
            failed = failures(state, error)
            if failed:
                if isinstance(writer, StagingWriter):
                    writer.abandon()
                if committing:
                    _discard(temporary)
                raise_agreed(error, failed)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return PendingSave(
        state,
        folder,
        target,
        lock,
        temporary,
        writer,
        handlers,
        error,
        what.step,
        notes,
        per_node=save_on_each_node,
        collective=collective,
        save=save,
    )


class PendingSave:
    """A save begun by :func:`begin_save`: its files written or staged, its lock held.

    :meth:`complete` syncs, agrees, writes the manifest, commits and releases the lock, once.
    """

    def __init__(
        self,
        state: RunState,
        folder: Path,
        target: Path,
        lock: WriterLock | None,
        temporary: Path,
        writer: FolderWriter,
        handlers: list[str],
        error: BaseException | None,
        step: int,
        notes: list[str],
        *,
        per_node: bool,
        collective: bool = True,
        save: str | None = None,
    ) -> None:
        self.state = state
        self.folder = folder
        self.notes = notes
        self._target = target
        self._lock = lock
        self._temporary = temporary
        self._writer = writer
        self._handlers = handlers
        self._error = error
        self._step = step
        self._per_node = per_node
        self._collective = collective
        self._save = save

    @property
    def staged_bytes(self) -> int:
        """How many bytes the staged state holds (0 for a save written directly)."""
        writer = self._writer
        return writer.staged_bytes() if isinstance(writer, StagingWriter) else 0

    def complete(self, group: Any = None) -> Path:
        """Write what was staged, sync, agree, commit; every process raises a failure at once.

        ``group``: the process group the processes agree on (the default one when ``None``).
        A save of replicated state (``collective=False``) agrees with no one, and moves in
        the other processes' parts of it already waiting, once committed.
        """
        with contextlib.nullcontext() if self._collective else alone():
            return self._complete(group)

    def _complete(self, group: Any) -> Path:
        state, temporary = self.state, self._temporary
        committer = self._lock is not None
        error = self._error
        try:
            writer = self._writer
            try:
                try:
                    if isinstance(writer, StagingWriter):
                        real = FolderWriter(temporary, state)
                        try:
                            writer.replay(real)
                        finally:
                            writer = real
                finally:
                    writer.finish()
            except BaseException as exc:
                error = error or exc
            entries = _gather_entries(state, writer, error, per_node=self._per_node, group=group)
            if committer and error is None and entries is not None:
                try:
                    entries.update(_unlisted(temporary, entries))
                except OSError as exc:
                    error = atomic_folders.write_error(temporary, exc, "listed")
            if error is not None or entries is None:
                if committer:
                    _discard(temporary)
                agree(state, error, group)
                raise CheckpointError(temporary, "was not written whole by every process")
            if committer:
                try:
                    # A user's own files in the folder (not the previous checkpoint's) are
                    # carried into the new one: a save replaces only what a save wrote.
                    owned = _owned(self._target, entries)
                    atomic_folders.keep_others(self._target, temporary, owned)
                    Manifest(
                        world_size=state.world_size,
                        step=self._step,
                        handlers=self._handlers,
                        distributions=_distributions(self.state, self._handlers),
                        files=entries,
                        save=self._save,
                    ).write(temporary)
                    atomic_folders.commit_folder(temporary, self._target, owned)
                    if self._save is not None:
                        parts.adopt(self._target, self._save)
                except BaseException as exc:
                    error = (
                        atomic_folders.write_error(temporary, exc, "committed")
                        if isinstance(exc, OSError)
                        else exc
                    )
                    _discard(temporary)
            # The commit is agreed like the writes: a failed one raises on every process at once.
            raise_agreed(error, failures(state, error, group))
            return self.folder
        finally:
            if self._lock is not None:
                self._lock.release()


def run_save_hooks(
    hooks: Sequence[SaveStateHook], models: list[Any], weights: list[Any], temporary: Path
) -> None:
    """Call the save-state pre-hooks as Accelerate does; a failure names the hook."""
    for hook in hooks:
        try:
            hook(models, weights, str(temporary))
        except Exception as exc:
            name = getattr(hook, "__qualname__", type(hook).__name__)
            raise CheckpointError(
                f"save_state pre-hook {name}",
                f"failed ({type(exc).__name__}: {exc}); nothing was committed",
            ) from exc


def _unlisted(
    temporary: Path, listed: dict[str, atomic_folders.FileEntry]
) -> dict[str, atomic_folders.FileEntry]:
    """The files in ``temporary`` no writer recorded (a save-state hook's), synced and hashed.

    Looked for once every process has finished writing, so each is whole.
    """
    found: dict[str, atomic_folders.FileEntry] = {}
    for dirpath, _, files in os.walk(temporary):
        for file in files:
            path = Path(dirpath) / file
            name = path.relative_to(temporary).as_posix()
            if name not in listed and name != MANIFEST:
                found[name] = atomic_folders.entry_of(path)
    return found


def _gather_entries(
    state: RunState,
    writer: FolderWriter,
    error: BaseException | None,
    *,
    per_node: bool,
    group: Any = None,
) -> dict[str, atomic_folders.FileEntry] | None:
    """The files the processes wrote, or ``None`` when any process failed.

    With ``per_node`` (``save_on_each_node``) only those of this machine's processes, which
    share this machine's disk.
    """
    mine = None if error is not None else dict(writer.entries)
    reports = exchange(state, (node_of(state), str(error) if error else None, mine), group)
    merged: dict[str, atomic_folders.FileEntry] = {}
    for node, failure, entries in reports:
        if failure is not None or entries is None:
            return None
        if not per_node or node == node_of(state):
            merged.update(entries)
    return merged


def write_own_part(state: RunState, folder: Path, what: Checkpointed, save: str) -> None:
    """Write this process's part of the save ``save`` of ``folder``, committed or not yet: its
    random states (loaders' positions, step) and what its handlers write for it alone (their
    files of this rank); never waits for another process."""
    target = target_of(folder)
    building = parts.begin_part(target, state.rank)
    writer = FolderWriter(building, state)
    try:
        writer.save(parts.part_file(state.rank), random_states(what.data_loaders, what.step))
        for obj in state.keyed(CHECKPOINT).values():
            if isinstance(obj, CheckpointOwner):
                obj.save_checkpoint(writer)  # its shared files are the main process's
        entries = writer.finish()
    except BaseException:
        with contextlib.suppress(BaseException):
            writer.finish()  # its background syncs end before the folder goes
        atomic_folders.remove_tree(building)
        raise
    parts.publish_part(target, save, state.rank, building, entries)
