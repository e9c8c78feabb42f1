"""``load_state``'s protocol: every object changes, or none does.

Every process reads and checks everything it will apply (sizes and XXH3 hashes against the
manifest; keys and shapes against the objects) before it changes anything, and the processes
agree. Then each object's state is applied in turn, after keeping what it needs to go back (its
state dict, the random states); if any object refuses its state, every object already changed is
restored and one :class:`~accelkw_core.errors.CheckpointError` names the object and the reason.
The processes agree on the apply too: when one fails, the others restore theirs and raise.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.contributions import ApplyLoaded, CheckpointOwner, StartsFresh
from accelkw_core.contract.points import CHECKPOINT, MODEL_CHECKPOINT, MODEL_STATE
from accelkw_core.errors import (
    CheckpointError,
    CheckpointLockedError,
    CheckpointNotFoundError,
    CheckpointWarning,
)
from accelkw_core.runtime.checkpoints.agreement import agree, failures
from accelkw_core.runtime.checkpoints.aliases import with_aliases
from accelkw_core.runtime.checkpoints.folder_io import FolderReader
from accelkw_core.runtime.checkpoints.layout import MODEL, SAFE_MODEL, Checkpointed, numbered
from accelkw_core.runtime.checkpoints.lock import WriterLock
from accelkw_core.runtime.checkpoints.manifest import read_manifest
from accelkw_core.runtime.checkpoints.parts import part_file, read_part
from accelkw_core.runtime.checkpoints.random_states import (
    loader_positions,
    random_states,
    set_loader_positions,
    set_random_states,
)
from accelkw_core.runtime.checkpoints.save import recover_commit

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = ["MODULE_PREFIX", "LoadStateHook", "load_checkpoint"]

#: What ``DistributedDataParallel`` puts before every key of its state dict; accelkw 0.2 saved it.
MODULE_PREFIX = "module."

Restore = Callable[[], None]

#: ``hook(models, input_dir)``: Accelerate's ``register_load_state_pre_hook``.
LoadStateHook = Callable[[list[Any], str], None]


@dataclass
class _Step:
    """One object's part of the apply: what it is, how to apply, how to keep a way back."""

    label: str
    apply: ApplyLoaded
    keep: Callable[[], Restore] | None
    #: Weights checked against the model's keys and shapes: copied into it in place, which
    #: cannot refuse them, so they are applied last, once the processes agreed on the rest.
    #: A copy of the model's own is still kept (in CPU memory): another process may fail in
    #: that last stage, and then this one goes back too.
    checked: bool = False


def _bind(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ApplyLoaded:
    def apply() -> None:
        fn(*args, **kwargs)

    return apply


def _kept_copy(obj: Any) -> Callable[[], Restore]:
    """Keep a deep copy of ``obj.state_dict()``; restoring loads it back."""

    def keep() -> Restore:
        saved = copy.deepcopy(obj.state_dict())
        return _bind(obj.load_state_dict, saved)

    return keep


def _kept_weights(
    load: Callable[[dict[str, Any]], Any], read: Callable[[], Any]
) -> Callable[[], Restore]:
    """Keep a copy of a model's tensors: its ``load_state_dict`` copies into them in place."""

    def keep() -> Restore:
        saved = {k: v.detach().clone() for k, v in read().items()}
        return _bind(load, saved)

    return keep


def _kept_on_cpu(model: Any) -> Callable[[], Restore]:
    """Keep a CPU copy of ``model``'s weights and buffers (no second copy on its device)."""

    def keep() -> Restore:
        saved = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        return _bind(model.load_state_dict, saved)

    return keep


def _kept_early(keep: Callable[[], Restore]) -> Callable[[], Restore]:
    """Run ``keep`` on a thread from now on; asking for it waits for its copy.

    A model's weights are copied while the rest of the checkpoint is read (the optimizer's
    state, the larger part): nothing changes them before the apply asks for the copy, and the
    copy then costs the load no time of its own. What ``keep`` raised is raised when asked.
    """
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkw-keep")
    try:
        future = pool.submit(keep)
    finally:
        pool.shutdown(wait=False)
    return future.result


def _on_cpu(tensors: dict[str, Any]) -> bool:
    """Whether every one of a model's ``tensors`` is in CPU memory (copied from a thread
    safely: no device stream is involved)."""
    return all(t.device.type == "cpu" for t in tensors.values())


def _kept_optimizer(optimizer: Any) -> Callable[[], Restore]:
    def keep() -> Restore:
        # No copy: an optimizer's load_state_dict builds a new state and never writes into the
        # tensors of the one it replaces, so these stay as they are until restored.
        return _bind(optimizer.load_state_dict, optimizer.state_dict())

    return keep


def _kept_stateful(obj: Any) -> Callable[[], Restore] | None:
    if callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    ):
        return _kept_copy(obj)
    return None


def _check_weights(
    path: Path, model: Any, current: dict[str, Any], weights: dict[str, Any], strict: bool
) -> None:
    """Refuse ``weights`` that do not fit ``model``, whose own are ``current``."""
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


def _without_wrapper_prefix(
    weights: dict[str, Any], model: Any, name: str, notes: list[str]
) -> dict[str, Any]:
    """Accept the ``module.``-prefixed weights accelkw 0.2 saved on several processes."""
    if not weights or not all(k.startswith(MODULE_PREFIX) for k in weights):
        return weights
    if any(k.startswith(MODULE_PREFIX) for k in model.state_dict()):
        return weights
    notes.append(
        f"{name} carries the DistributedDataParallel wrapper's key names (module.*), as "
        "accelkw 0.2 saved them: loaded without the prefix; a new save_state writes "
        "Accelerate's names"
    )
    return {k[len(MODULE_PREFIX) :]: v for k, v in weights.items()}


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


def _read_model(reader: FolderReader, index: int) -> tuple[str, dict[str, Any]]:
    safe, plain = numbered(SAFE_MODEL, index), numbered(MODEL, index)
    if reader.has(safe):
        return safe, reader.load_tensors(safe)
    if reader.has(plain):
        return plain, dict(reader.load(plain))
    raise CheckpointError(reader.folder / safe, f"is missing (and so is {plain})")


class _Read:
    """What reading a checkpoint found: the steps that apply it, warnings, the step, and the
    contributions whose state it lacks."""

    def __init__(self) -> None:
        self.steps: list[_Step] = []
        self.notes: list[str] = []
        self.step: int | None = None
        self.absent: list[Any] = []


def _read_models(
    reader: FolderReader,
    state: RunState,
    what: Checkpointed,
    load_kwargs: dict[str, Any],
    model_kwargs: dict[str, Any],
    read: _Read,
) -> None:
    store = state.values(MODEL_CHECKPOINT)
    if store:
        models, optimizers = what.models, what.optimizers

        def keep_store() -> Restore:
            undo = [_kept_weights(m.load_state_dict, m.state_dict)() for m in models]
            undo += [_kept_optimizer(o)() for o in optimizers]

            def restore() -> None:
                for one in undo:
                    one()

            return restore

        read.steps.append(
            _Step(
                "the models and optimizers",
                store[0].read_checkpoint(reader, models, optimizers),
                keep_store,
            )
        )
        return
    contributed = state.values(MODEL_STATE)
    strict = bool(model_kwargs.get("strict", True))
    for i, (model, unwrapped) in enumerate(zip(what.models, what.unwrapped, strict=True)):
        name, weights = _read_model(reader, i)
        label = f"model {i} ({type(unwrapped).__name__})"
        if contributed:
            owner = contributed[0]
            read.steps.append(
                _Step(
                    label,
                    _bind(owner.load_state_dict, model, weights),
                    _kept_weights(
                        functools.partial(owner.load_state_dict, model),
                        functools.partial(owner.state_dict, model),
                    ),
                )
            )
            continue
        weights = _without_wrapper_prefix(weights, unwrapped, name, read.notes)
        # A tied weight's second name is not in a safetensors file (either framework's).
        current = unwrapped.state_dict()
        weights = with_aliases(weights, current)
        _check_weights(reader.folder / name, unwrapped, current, weights, strict)
        keep = _kept_on_cpu(unwrapped)
        read.steps.append(
            _Step(
                label,
                _bind(unwrapped.load_state_dict, weights, **model_kwargs),
                _kept_early(keep) if _on_cpu(current) else keep,
                True,
            )
        )
    for i, optimizer in enumerate(what.optimizers):
        name = numbered("optimizer.bin", i)
        saved = reader.load(name, **load_kwargs)
        _check_optimizer(reader.folder / name, optimizer, saved)
        read.steps.append(
            _Step(
                f"optimizer {i}",
                _bind(optimizer.load_state_dict, saved),
                _kept_optimizer(optimizer),
            )
        )


def _read_all(
    reader: FolderReader,
    state: RunState,
    what: Checkpointed,
    load_kwargs: dict[str, Any],
    model_kwargs: dict[str, Any],
) -> _Read:
    """Read and check everything; nothing is changed."""
    read = _Read()
    _read_models(reader, state, what, load_kwargs, model_kwargs, read)
    for i, scheduler in enumerate(what.schedulers):
        saved = reader.load(numbered("scheduler.bin", i), **load_kwargs)
        read.steps.append(
            _Step(
                f"scheduler {i} ({type(getattr(scheduler, 'scheduler', scheduler)).__name__})",
                _bind(scheduler.load_state_dict, saved),
                _kept_copy(scheduler),
            )
        )
    for i, obj in enumerate(what.custom):
        saved = reader.load(f"custom_checkpoint_{i}.pkl", **load_kwargs)
        read.steps.append(
            _Step(
                f"registered object {i} ({type(obj).__name__})",
                _bind(obj.load_state_dict, saved),
                _kept_copy(obj),
            )
        )
    saved_handlers = set(reader.manifest.handlers) if reader.manifest is not None else None
    keyed = state.keyed(CHECKPOINT)
    owners: list[_Step] = []
    for key, obj in keyed.items():
        found: ApplyLoaded | None = None
        if isinstance(obj, CheckpointOwner):
            found = obj.read_checkpoint(reader)
        elif reader.has(f"{key}.pt"):
            found = _bind(obj.load_state_dict, reader.load(f"{key}.pt", **load_kwargs))
        if found is None:
            read.notes.append(
                f"handler {key!r} has no state in this checkpoint (it was added since the save): "
                "it starts fresh"
            )
            read.absent.append(obj)
            continue
        step = _Step(f"handler {key!r}", found, _kept_stateful(obj))
        # An owner without a state dict cannot be restored by the runtime: it is applied
        # after every object that can, so that only it is left to undo its own part.
        (owners if step.keep is None else read.steps).append(step)
    read.steps += owners
    if saved_handlers is not None:
        shipped = reader.manifest.distributions if reader.manifest is not None else {}
        for key in sorted(saved_handlers - set(keyed)):
            dist = shipped.get(key)
            hint = (
                f"; to load it, install {dist} (pip install {dist}) or enable it if it is"
                " installed but turned off"
                if dist
                else ""
            )
            read.notes.append(
                f"the checkpoint holds state of handler {key!r}"
                + (f" (from {dist})" if dist else "")
                + f", which is not in this run: left alone{hint}"
            )
    _read_random_states(reader, state, what, read)
    return read


def _read_random_states(
    reader: FolderReader, state: RunState, what: Checkpointed, read: _Read
) -> None:
    """This process's part (its random states, loaders' positions and step), or, when the
    checkpoint has none of it, Accelerate's warning and the step and positions the shared part
    records (the committing process's), so every process resumes the same step."""
    name = part_file(state.rank)
    manifest = reader.manifest
    states: dict[str, Any] | None = None
    why = ""
    if manifest is not None and name in manifest.files:
        states = reader.load(name)
    elif manifest is not None:
        why = (
            f"the checkpoint holds no part of process {state.rank} for this save (it was "
            "saved by fewer processes, or by the main process alone, as "
            "`if accelerator.is_main_process: accelerator.save_state(...)` saves)"
        )
    else:
        try:
            states = reader.load(name)
        except CheckpointError as exc:
            why = str(exc)
    loaders, step = what.data_loaders, what.step
    if states is None:
        shared = _shared_part(reader)
        # Accelerate's words for it, then why and what is restored instead.
        read.notes.append(
            f"Could not load random states: {why}; this process continues with its current "
            "ones"
            + (
                ", and the step and data loaders' positions the checkpoint records"
                if shared is not None
                else ""
            )
        )
        if shared is None:
            return
        positions = shared.get("data_loaders", ())

        def keep_positions() -> Restore:
            return _bind(set_loader_positions, loader_positions(loaders), loaders)

        read.steps.append(
            _Step(
                "the data loaders' positions",
                _bind(set_loader_positions, positions, loaders),
                keep_positions,
            )
        )
        read.step = manifest.step if manifest is not None else int(shared.get("step", 0))
        return

    def keep() -> Restore:
        return _bind(set_random_states, random_states(loaders, step), loaders)

    read.steps.append(_Step("the random states", _bind(set_random_states, states, loaders), keep))
    read.step = int(states.get("step", 0))


def _shared_part(reader: FolderReader) -> dict[str, Any] | None:
    """The part the shared commit holds (the committing process's), for its step and loaders'
    positions; ``None`` when there is none that checks out."""
    if reader.manifest is not None:
        listed = sorted(
            (n for n in reader.manifest.files if re.fullmatch(r"random_states_\d+\.pkl", n)),
            key=lambda n: int(n[len("random_states_") : -len(".pkl")]),
        )
    else:
        listed = [part_file(0)]
    for name in listed:
        try:
            found = reader.load(name)
        except CheckpointError:
            continue
        if isinstance(found, dict):
            return found
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _apply(
    steps: list[_Step], folder: Path
) -> tuple[list[Restore], Restore | None, CheckpointError | None]:
    """Apply each step, keeping its way back first; stops at the first that raises.

    Returns the ways back of the steps applied, that of the step that raised (its object may
    be half changed), and the error, whose ``__cause__`` is what the object raised.
    """
    undo: list[Restore] = []
    for step in steps:
        back: Restore | None = None
        try:
            if step.keep is not None:
                back = step.keep()
            step.apply()
        except Exception as exc:
            error = CheckpointError(
                folder, f"could not be loaded into {step.label} ({_first_line(exc)})"
            )
            error.__cause__ = exc
            return undo, back, error
        if back is not None:
            undo.append(back)
    return undo, None, None


def _restore(undo: list[Restore], refused: Restore | None, error: CheckpointError) -> None:
    """Undo every applied step, last first, and say in ``error`` whether every one went back.

    ``error`` is the failure that made the load go back and stays the one raised: a restore
    that fails too is a note on it, never a replacement. The object that refused its state is
    given its old one back too, on a best-effort basis: the same ``load_state_dict`` may
    refuse that as well, when it changed nothing.
    """
    if refused is not None:
        with contextlib.suppress(Exception):
            refused()
    failed = 0
    for restore in reversed(undo):
        try:
            restore()
        except Exception as exc:
            failed += 1
            error.add_note(f"restoring an object the load had changed failed: {_first_line(exc)}")
    if failed:
        error.problem += f"; {failed} of the objects it had changed could not be restored"
    else:
        error.problem += "; every object the load had changed was restored"


def _recover_if_missing(state: RunState, folder: Path) -> BaseException | None:
    """A commit cut short between its renames leaves no folder under the name: finish it."""
    if not state.is_main_process or folder.exists():
        return None
    lock = WriterLock(folder)
    try:
        lock.acquire()
    except CheckpointLockedError:
        return None  # a save is on its way: it recovers the folder itself
    except OSError:
        return None  # no lock to be had in a read-only place: nothing to recover there
    try:
        recover_commit(folder)
    except OSError as exc:
        return exc
    finally:
        lock.release()
    return None


def _run_hooks(
    hooks: Sequence[LoadStateHook], folder: Path, manifest: Any, what: Checkpointed
) -> tuple[Checkpointed, list[Restore]]:
    """Check every file, keep the models' weights, call the load-state pre-hooks.

    Returns what is left for the core to load (the models no hook popped) and the ways back of
    every model's weights (a hook loads into models before the rest is checked).
    """
    if manifest is not None:
        # A hook reads the files it saved itself: each is checked before any hook runs.
        for name in sorted(manifest.files):
            manifest.check_file(folder, name)
    kept = [_kept_weights(m.load_state_dict, m.state_dict)() for m in what.unwrapped]
    models = list(what.models)
    for hook in hooks:
        try:
            hook(models, str(folder))
        except Exception as exc:
            name = getattr(hook, "__qualname__", type(hook).__name__)
            error = CheckpointError(
                f"load_state pre-hook {name}",
                f"failed ({_first_line(exc)})",
            )
            _restore(kept, None, error)
            raise error from exc
    left = {id(m) for m in models}
    pairs = [(m, u) for m, u in zip(what.models, what.unwrapped, strict=True) if id(m) in left]
    remaining = Checkpointed(
        [m for m, _ in pairs],
        what.optimizers,
        what.schedulers,
        what.data_loaders,
        what.custom,
        what.step,
        unwrapped=[u for _, u in pairs],
    )
    return remaining, kept


def _agree_or_restore(
    state: RunState, error: BaseException | None, undo: list[Restore], folder: Path
) -> None:
    """Agree on a stage; on any process's failure, restore what ``undo`` holds and raise.

    The error raised is this process's own (kept as the cause when it is not a
    :class:`CheckpointError`), else the first failed process's.
    """
    failed = failures(state, error)
    if not failed:
        return
    if error is None:
        rank, message = failed[0]
        error = CheckpointError(f"(process {rank})", f"failed: {message}")
    if not undo:
        raise error
    if isinstance(error, CheckpointError):
        _restore(undo, None, error)
        raise error
    if not isinstance(error, Exception):  # Ctrl-C and the like go on as themselves
        _restore(undo, None, CheckpointError(folder, "was interrupted while loading"))
        raise error
    wrapped = CheckpointError(folder, f"could not be loaded ({_first_line(error)})")
    _restore(undo, None, wrapped)
    raise wrapped from error


def load_checkpoint(
    state: RunState,
    folder: Path,
    what: Checkpointed,
    *,
    load_kwargs: dict[str, Any] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    hooks: Sequence[LoadStateHook] = (),
) -> int | None:
    """Check the checkpoint in ``folder`` whole, then load it into the objects of ``what``.

    ``hooks`` (``register_load_state_pre_hook``'s) are called with the prepared models and the
    folder once every file of the checkpoint is checked; the models they pop are not loaded
    here, and what they loaded is restored with the rest when the load fails.

    Returns the saved ``step``, or ``None`` when this process's random states were not in an
    Accelerate checkpoint (a warning says so). Raises :class:`CheckpointError`, having changed
    nothing, when any process finds a file missing, short or damaged or not fitting its object,
    or when any object refuses its state.
    """
    error = _recover_if_missing(state, folder)
    agree(state, error)
    manifest = None
    try:
        if not folder.is_dir():
            raise CheckpointNotFoundError(folder, "does not exist (no checkpoint folder there)")
        manifest = read_manifest(folder)
        if manifest is not None:
            # This process's own part, when the checkpoint holds one of this save: read and
            # checked as the rest (the main process's manifest cannot list it).
            own = read_part(folder, manifest, state.rank)
            if own is not None:
                manifest = dataclasses.replace(manifest, files={**manifest.files, **own.files})
            missing = manifest.missing(folder)
            if missing:
                raise CheckpointError(folder / missing[0], "is missing")
    except BaseException as exc:
        error = exc
    # Agreed before any contribution reads: one that runs collectives (DCP) must find every
    # process there, not one that already gave up.
    agree(state, error)
    if manifest is None and state.is_main_process:
        warnings.warn(
            f"load_state: {folder} has no manifest (written by Accelerate, or its manifest was "
            "deleted): its files cannot be verified, only read",
            CheckpointWarning,
            stacklevel=3,
        )
    kept: list[Restore] = []
    try:
        if hooks:
            what, kept = _run_hooks(hooks, folder, manifest, what)
    except BaseException as exc:
        error = exc
    # Agreed whether this process has hooks or not: a hook registered on some processes only
    # (the main one) never changes the sequence of collectives.
    _agree_or_restore(state, error, kept, folder)
    read = _Read()
    try:
        reader = FolderReader(folder, manifest, state)
        read = _read_all(reader, state, what, dict(load_kwargs or {}), dict(model_kwargs or {}))
    except BaseException as exc:
        error = exc
    _agree_or_restore(state, error, kept, folder)
    undo: list[Restore] = list(kept)
    for stage in ([s for s in read.steps if not s.checked], [s for s in read.steps if s.checked]):
        done, refused, error = _apply(stage, folder)
        undo += done
        if error is not None:
            _restore(undo, refused, error)
        # Every process gets here, whatever happened: each stage is agreed like the reads, and
        # another process's failure makes this one go back too (its own is restored above).
        _agree_or_restore(state, error, [] if error is not None else undo, folder)
    for note in read.notes:
        warnings.warn(f"load_state: {note}", CheckpointWarning, stacklevel=3)
    if read.absent:  # the same on every process: what the checkpoint lacks
        error = None
        try:
            for obj in read.absent:
                if isinstance(obj, StartsFresh):
                    obj.checkpoint_loaded_without_state()
        except Exception as exc:
            error = exc
        agree(state, error)
    return read.step
