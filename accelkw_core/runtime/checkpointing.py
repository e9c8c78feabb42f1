"""``save_state``/``load_state``: checkpoints that are whole or absent, and loads that change all or nothing.

Layout (Accelerate's): ``model.safetensors`` (``pytorch_model.bin`` with
``safe_serialization=False``; ``model_1.safetensors``, ... for more models), ``optimizer.bin``,
``scheduler.bin``, ``custom_checkpoint_<i>.pkl`` for objects registered with
``register_for_checkpointing``, ``random_states_<rank>.pkl`` per process, one ``<key>.pt`` per
handler contributing a ``state_dict()`` to the ``checkpoint`` point, what each handler that owns
its checkpoint writes, and ``accelkw_checkpoint.json``, the manifest, last.

Saving: every process writes its files into a temporary folder beside the final one, fsynced;
the processes agree that all writes succeeded; the main process writes the manifest and moves
the folder into place in one rename (:mod:`accelkw_core.runtime.durable`). A crash at any instant
leaves the previous checkpoint or the new one, whole.

Loading: every process reads and checks everything it will apply (sizes and XXH3 hashes against the
manifest; keys and shapes against the objects) before it changes anything; the processes agree;
only then is the state applied. A missing, short or damaged file is one
:class:`~accelkw_core.errors.CheckpointError` naming it, and every object is left as it was.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.contributions import CheckpointOwner
from accelkw_core.contract.points import CHECKPOINT, MODEL_CHECKPOINT, MODEL_STATE
from accelkw_core.errors import CheckpointError, CheckpointNotFoundError, CheckpointWarning
from accelkw_core.runtime import durable
from accelkw_core.runtime.checkpoint_io import CheckpointReader, CheckpointWriter
from accelkw_core.runtime.manifest import MANIFEST, Manifest, read_manifest
from accelkw_core.runtime.project import is_complete
from accelkw_core.runtime.random_states import random_states, set_random_states

if TYPE_CHECKING:
    from accelkw_core.runtime.state import AcceleratorState

__all__ = [
    "MODEL",
    "SAFE_MODEL",
    "Checkpointed",
    "load_checkpoint",
    "model_state_dict",
    "numbered",
    "save_checkpoint",
]

MODEL = "pytorch_model.bin"
SAFE_MODEL = "model.safetensors"
Apply = Callable[[], None]

# What a folder may already hold for save_state to replace it: a previous checkpoint's files.
_CHECKPOINT_FILE = re.compile(
    r"(pytorch_model|model)(_\d+)?\.(bin|safetensors)|(optimizer|scheduler|sampler|dl_state_dict)"
    r"(_\d+)?\.bin|custom_checkpoint_\d+\.pkl|random_states_\d+\.pkl|[\w.-]+\.pt"
    r"|pytorch_model_fsdp(_\d+)?(\.bin)?|optimizer_\d+|" + re.escape(MANIFEST)
)


class Checkpointed:
    """What a checkpoint holds: prepared models, optimizers, schedulers, loaders, custom objects."""

    def __init__(
        self,
        models: Sequence[Any],
        optimizers: Sequence[Any],
        schedulers: Sequence[Any],
        data_loaders: Sequence[Any],
        custom: Sequence[Any],
        step: int = 0,
    ) -> None:
        self.models = list(models)
        self.optimizers = list(optimizers)
        self.schedulers = list(schedulers)
        self.data_loaders = list(data_loaders)
        self.custom = list(custom)
        self.step = step


def numbered(name: str, index: int) -> str:
    """``optimizer.bin`` for the first, ``optimizer_1.bin`` for the second (Accelerate's names)."""
    if index == 0:
        return name
    stem, dot, suffix = name.partition(".")
    return f"{stem}_{index}{dot}{suffix}"


def model_state_dict(state: AcceleratorState, model: Any, unwrapped: Any) -> dict[str, Any]:
    """``model``'s weights through the ``model_state`` contribution, else ``unwrapped.state_dict()``."""
    contributed = state.values(MODEL_STATE)
    if contributed:
        return dict(contributed[0].state_dict(model))
    return dict(unwrapped.state_dict())


def _committer(state: AcceleratorState, on_each_node: bool) -> bool:
    return state.local_rank == 0 if on_each_node else state.is_main_process


def _agree(state: AcceleratorState, error: BaseException | None) -> None:
    """Raise on every process if any failed: the process's own error, else the first one's."""
    from accelkw_core.runtime import collectives as ops

    if state.distributed and ops.has_group():
        report = None if error is None else (state.rank, str(error))
        reports = ops.gather_objects([report], state)
        failed = [r for r in reports if r is not None]
        if failed and error is None:
            rank, message = failed[0]
            raise CheckpointError(f"(process {rank})", f"failed: {message}")
    if error is not None:
        raise error


def _barrier(state: AcceleratorState) -> None:
    from accelkw_core.runtime import collectives as ops

    if state.distributed and ops.has_group():
        ops.barrier(state)


def _written(folder: Path) -> bool:
    """Whether a temporary folder of ours was written whole (its manifest checks out)."""
    return is_complete(folder, manifest_required=True)


def _prepare_target(folder: Path) -> list[str]:
    """Make ``folder``'s name ready for a new checkpoint; what it found, for warnings."""
    notes = []
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(folder, "is a file, not a folder: save_state writes a folder")
    recovered = durable.recover(folder, _written)
    if recovered:
        notes.append(recovered)
    for stale in durable.stale_temporaries(folder.parent):
        durable.remove_tree(stale)
        notes.append(f"removed {stale.name}, left by a save that was interrupted")
    if folder.is_dir():
        foreign = sorted(p.name for p in folder.iterdir() if not _CHECKPOINT_FILE.fullmatch(p.name))
        if foreign:
            raise CheckpointError(
                folder,
                "holds files that are not part of a checkpoint ("
                + ", ".join(foreign[:3])
                + (", ..." if len(foreign) > 3 else "")
                + "); save_state replaces the whole folder, so give it a folder of its own",
            )
    folder.parent.mkdir(parents=True, exist_ok=True)
    return notes


def _write_states(
    writer: CheckpointWriter,
    state: AcceleratorState,
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
            # The optimizers first: their state is the largest, and its fsync goes on while
            # the rest is written.
            for i, optimizer in enumerate(what.optimizers):
                writer.save(numbered("optimizer.bin", i), optimizer.state_dict())
            for i, model_weights in enumerate(weights):
                if safe:
                    writer.save_tensors(numbered(SAFE_MODEL, i), model_weights)
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


def save_checkpoint(
    state: AcceleratorState,
    folder: Path,
    what: Checkpointed,
    weights: Sequence[dict[str, Any]],
    *,
    safe_serialization: bool = True,
    save_on_each_node: bool = False,
) -> tuple[Path, list[str]]:
    """Write a whole checkpoint to ``folder``, replacing the one there only once it is complete.

    Returns the folder and notes on what was cleaned up (stale temporaries, an interrupted commit).
    """
    committer = _committer(state, save_on_each_node)
    temporary = durable.temporary_of(folder)
    notes: list[str] = []
    error: BaseException | None = None
    if committer:
        try:
            notes = _prepare_target(folder)
            durable.remove_tree(temporary)
            temporary.mkdir(parents=True)
        except BaseException as exc:
            error = exc
    _agree(state, error)
    _barrier(state)
    writer = CheckpointWriter(temporary, state)
    handlers: list[str] = []
    try:
        try:
            handlers = _write_states(
                writer, state, what, weights, safe=safe_serialization, shared=committer
            )
        finally:
            writer.finish()
    except BaseException as exc:
        error = exc
    entries = _gather_entries(state, writer, error, per_node=save_on_each_node)
    if error is not None or entries is None:
        if committer:
            durable.remove_tree(temporary)
        _agree(state, error)
    if committer and entries is not None:
        Manifest(
            world_size=state.world_size, step=what.step, handlers=handlers, files=entries
        ).write(temporary)
        durable.commit_folder(temporary, folder)
    _barrier(state)
    return folder, notes


def _node(state: AcceleratorState) -> int:
    # torchrun numbers the ranks of a machine contiguously: its first rank names the machine.
    return state.rank - state.local_rank


def _gather_entries(
    state: AcceleratorState,
    writer: CheckpointWriter,
    error: BaseException | None,
    *,
    per_node: bool,
) -> dict[str, durable.FileEntry] | None:
    """The files the processes wrote, or ``None`` when any process failed.

    With ``per_node`` (``save_on_each_node``) only those of this machine's processes, which
    share this machine's disk.
    """
    from accelkw_core.runtime import collectives as ops

    mine = None if error is not None else dict(writer.entries)
    if not (state.distributed and ops.has_group()):
        return mine
    report = (_node(state), str(error) if error else None, mine)
    merged: dict[str, durable.FileEntry] = {}
    for node, failure, entries in ops.gather_objects([report], state):
        if failure is not None or entries is None:
            return None
        if not per_node or node == _node(state):
            merged.update(entries)
    return merged


# -- loading ---------------------------------------------------------------------------------


def _check_weights(path: Path, model: Any, weights: dict[str, Any], strict: bool) -> None:
    current = model.state_dict()
    if strict:
        missing = sorted(set(current) - set(weights))
        unexpected = sorted(set(weights) - set(current))
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(
                    "lacks " + ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
                )
            if unexpected:
                parts.append(
                    "has unexpected "
                    + ", ".join(unexpected[:3])
                    + (" ..." if len(unexpected) > 3 else "")
                )
            raise CheckpointError(
                path, f"does not fit the model ({type(model).__name__}): " + "; ".join(parts)
            )
    for key, value in weights.items():
        have = current.get(key)
        shape = getattr(value, "shape", None)
        if have is not None and shape is not None and tuple(have.shape) != tuple(shape):
            raise CheckpointError(
                path,
                f"does not fit the model: {key} has shape {tuple(shape)}, "
                f"the model's is {tuple(have.shape)}",
            )


def _check_optimizer(path: Path, optimizer: Any, saved: Any) -> None:
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if groups is None or "state" not in saved:
        raise CheckpointError(path, "is not an optimizer state_dict")
    ours = optimizer.state_dict()["param_groups"]
    sizes = [len(g["params"]) for g in groups]
    mine = [len(g["params"]) for g in ours]
    if sizes != mine:
        raise CheckpointError(
            path,
            f"does not fit the optimizer: parameter groups of sizes {sizes}, "
            f"the optimizer's are {mine}",
        )


def _read_model(reader: CheckpointReader, index: int) -> tuple[str, dict[str, Any]]:
    safe, plain = numbered(SAFE_MODEL, index), numbered(MODEL, index)
    if reader.has(safe):
        return safe, reader.load_tensors(safe)
    if reader.has(plain):
        return plain, dict(reader.load(plain))
    raise CheckpointError(reader.folder / safe, f"is missing (and so is {plain})")


def _read_all(
    reader: CheckpointReader,
    state: AcceleratorState,
    what: Checkpointed,
    load_kwargs: dict[str, Any],
    model_kwargs: dict[str, Any],
) -> tuple[list[Apply], list[str], int | None]:
    """Read and check everything; returns the steps that apply it, warnings, and the step."""
    steps: list[Apply] = []
    notes: list[str] = []
    store = state.values(MODEL_CHECKPOINT)
    if store:
        steps.append(store[0].read_checkpoint(reader, what.models, what.optimizers))
    else:
        contributed = state.values(MODEL_STATE)
        strict = bool(model_kwargs.get("strict", True))
        for i, model in enumerate(what.models):
            name, weights = _read_model(reader, i)
            if contributed:
                steps.append(_bind(contributed[0].load_state_dict, model, weights))
            else:
                _check_weights(reader.folder / name, model, weights, strict)
                steps.append(_bind(model.load_state_dict, weights, **model_kwargs))
        for i, optimizer in enumerate(what.optimizers):
            name = numbered("optimizer.bin", i)
            saved = reader.load(name, **load_kwargs)
            _check_optimizer(reader.folder / name, optimizer, saved)
            steps.append(_bind(optimizer.load_state_dict, saved))
    for i, scheduler in enumerate(what.schedulers):
        steps.append(
            _bind(
                scheduler.load_state_dict, reader.load(numbered("scheduler.bin", i), **load_kwargs)
            )
        )
    for i, obj in enumerate(what.custom):
        steps.append(
            _bind(obj.load_state_dict, reader.load(f"custom_checkpoint_{i}.pkl", **load_kwargs))
        )
    saved_handlers = set(reader.manifest.handlers) if reader.manifest is not None else None
    keyed = state.keyed(CHECKPOINT)
    for key, obj in keyed.items():
        found: Apply | None = None
        if isinstance(obj, CheckpointOwner):
            found = obj.read_checkpoint(reader)
        elif reader.has(f"{key}.pt"):
            found = _bind(obj.load_state_dict, reader.load(f"{key}.pt", **load_kwargs))
        if found is None:
            notes.append(
                f"handler {key!r} has no state in this checkpoint (it was added since the save): "
                "it starts fresh"
            )
        else:
            steps.append(found)
    if saved_handlers is not None:
        for key in sorted(saved_handlers - set(keyed)):
            notes.append(
                f"the checkpoint holds state of handler {key!r}, which is not in this run: "
                "left alone"
            )
    step: int | None = None
    name = f"random_states_{state.rank}.pkl"
    if reader.manifest is not None and name in reader.manifest.files:
        states = reader.load(name)
    else:
        try:
            states = reader.load(name)
        except CheckpointError as exc:
            states = None
            notes.append(
                f"could not restore the random states ({exc}); the run continues with the "
                "current ones"
            )
    if states is not None:
        steps.append(_bind(set_random_states, states, what.data_loaders))
        step = int(states.get("step", 0))
    return steps, notes, step


def _bind(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Apply:
    def apply() -> None:
        fn(*args, **kwargs)

    return apply


def load_checkpoint(
    state: AcceleratorState,
    folder: Path,
    what: Checkpointed,
    *,
    load_kwargs: dict[str, Any] | None = None,
    model_kwargs: dict[str, Any] | None = None,
) -> int | None:
    """Check the checkpoint in ``folder`` whole, then load it into the objects of ``what``.

    Returns the saved ``step``, or ``None`` when this process's random states were not in an
    Accelerate checkpoint (a warning says so). Raises :class:`CheckpointError`, having changed
    nothing, when any process finds a file missing, short, damaged or not fitting its object.
    """
    error: BaseException | None = None
    if state.is_main_process and not folder.exists():
        try:
            durable.recover(folder, _written)
        except OSError as exc:
            error = exc
    _barrier(state)
    manifest = None
    try:
        if error is not None:
            raise error
        if not folder.is_dir():
            raise CheckpointNotFoundError(folder, "does not exist (no checkpoint folder there)")
        manifest = read_manifest(folder)
        if manifest is not None:
            missing = manifest.missing(folder)
            if missing:
                raise CheckpointError(folder / missing[0], "is missing")
    except BaseException as exc:
        error = exc
    # Agreed before any contribution reads: one that runs collectives (DCP) must find every
    # process there, not one that already gave up.
    _agree(state, error)
    steps: list[Apply] = []
    notes: list[str] = []
    step: int | None = None
    try:
        reader = CheckpointReader(folder, manifest, state)
        steps, notes, step = _read_all(
            reader, state, what, dict(load_kwargs or {}), dict(model_kwargs or {})
        )
    except BaseException as exc:
        error = exc
    _agree(state, error)
    for apply in steps:
        apply()
    for note in notes:
        warnings.warn(f"load_state: {note}", CheckpointWarning, stacklevel=3)
    return step
