"""``load_state``'s protocol: everything checked and agreed before anything changes.

Every process checks everything it will apply (sizes and XXH3 hashes against the manifest; the
weights' keys and shapes against the models, from the files' headers; the optimizers' states
against their parameter groups) before it changes anything, and the processes agree. Then the
objects other than the weights are applied in turn, after keeping what each needs to go back
(a copy of a small state; an optimizer's current state, which its load replaces); if any object
refuses its state, on any process, every object already changed is restored and one
:class:`~accelkw_core.errors.CheckpointError` names the object and the reason. The weights come
last, read and copied into each model in turn with no copy kept, so a load holds the memory
Accelerate's holds: no copy of a model on the host or its device.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
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
from accelkw_core.runtime.checkpoints.aliases import alias_sources, with_aliases
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
    """One object's part of the apply: what it is, how to apply, how to keep a way back.

    ``keep`` is ``None`` for the weights (:attr:`weights`), which are applied last, once every
    other object is applied and the processes agreed, with no copy kept: the load then holds
    no more memory than Accelerate's (no copy of a model on the host or its device).
    """

    label: str
    apply: ApplyLoaded
    keep: Callable[[], Restore] | None
    weights: bool = False
    #: Where it goes among the others: 0 a small state, 1 an optimizer's, 2 an owner's.
    order: int = 0


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


def _kept_optimizer(optimizer: Any) -> Callable[[], Restore]:
    def keep() -> Restore:
        # No copy: an optimizer's load_state_dict builds a new state and never writes into the
        # tensors of the one it replaces, so these stay as they are until restored. They are
        # let go once the processes agreed on the stage, before the weights are read.
        return _bind(optimizer.load_state_dict, optimizer.state_dict())

    return keep


def _kept_stateful(obj: Any) -> Callable[[], Restore] | None:
    if callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    ):
        return _kept_copy(obj)
    return None


def _fit_error(
    path: Path, model: Any, missing: list[str], unexpected: list[str]
) -> CheckpointError:
    parts = []
    if missing:
        parts.append("lacks " + ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else ""))
    if unexpected:
        parts.append(
            "has unexpected " + ", ".join(unexpected[:3]) + (" ..." if len(unexpected) > 3 else "")
        )
    return CheckpointError(
        path, f"does not fit the model ({type(model).__name__}): " + "; ".join(parts)
    )


def _kind(dtype: str) -> str:
    """What kind of number a dtype holds, from torch's name (``torch.float16``) or
    safetensors' (``F16``): ``load_state_dict`` converts within a kind, not across."""
    name = dtype.removeprefix("torch.").lower()
    if name in ("bool",):
        return "bool"
    if name.startswith(("c", "complex")):
        return "complex"
    if name.startswith(("f", "bf", "half", "double")):
        return "float"
    return "integer"


def _check_weights(
    path: Path,
    model: Any,
    current: dict[str, Any],
    specs: dict[str, tuple[tuple[int, ...], str]],
    filled: dict[str, str],
    strict: bool,
) -> None:
    """Refuse weights of these ``specs`` (shape and dtype, by name) that do not fit ``model``,
    whose own are ``current``; ``filled``: the names the file lacks that take another name's
    values. A dtype of another kind (integers into floats) is refused; one of the same kind
    (float16 into float32) is converted by ``load_state_dict``, as in Accelerate."""
    if strict:
        missing = sorted(set(current) - set(specs) - set(filled))
        unexpected = sorted(set(specs) - set(current))
        if missing or unexpected:
            raise _fit_error(path, model, missing, unexpected)
    for key, (shape, dtype) in specs.items():
        have = current.get(key)
        if have is None:
            continue
        if tuple(have.shape) != tuple(shape):
            raise CheckpointError(
                path,
                f"does not fit the model: {key} has shape {tuple(shape)}, "
                f"the model's is {tuple(have.shape)}",
            )
        if _kind(dtype) != _kind(str(have.dtype)):
            raise CheckpointError(
                path,
                f"does not fit the model: {key} holds {dtype} ({_kind(dtype)}), "
                f"the model's is {have.dtype} ({_kind(str(have.dtype))})",
            )


def _prefixed(keys: Any, model_keys: Any) -> bool:
    """Whether ``keys`` carry the ``module.`` prefix accelkw 0.2 saved, which the model's lack."""
    keys = list(keys)
    if not keys or not all(k.startswith(MODULE_PREFIX) for k in keys):
        return False
    return not any(k.startswith(MODULE_PREFIX) for k in model_keys)


def _unprefixed(weights: dict[str, Any]) -> dict[str, Any]:
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


def _model_file(reader: FolderReader, index: int) -> str:
    safe, plain = numbered(SAFE_MODEL, index), numbered(MODEL, index)
    if reader.has(safe):
        return safe
    if reader.has(plain):
        return plain
    raise CheckpointError(reader.folder / safe, f"is missing (and so is {plain})")


def _read_model(reader: FolderReader, index: int) -> tuple[str, dict[str, Any]]:
    name = _model_file(reader, index)
    if name.endswith(".safetensors"):
        return name, reader.load_tensors(name)
    return name, dict(reader.load(name))


class _Read:
    """What reading a checkpoint found: the steps that apply it, warnings, the step, and the
    contributions whose state it lacks."""

    def __init__(self) -> None:
        self.steps: list[_Step] = []
        self.notes: list[str] = []
        self.step: int | None = None
        self.absent: list[Any] = []


def _checked_model(
    reader: FolderReader,
    index: int,
    unwrapped: Any,
    model_kwargs: dict[str, Any],
    notes: list[str],
) -> ApplyLoaded:
    """Check model ``index``'s file against ``unwrapped`` (keys, shapes, dtypes: a safetensors
    file's header, a torch file mapped, not read); returns what reads and copies its weights in."""
    name = _model_file(reader, index)
    path = reader.folder / name
    current = unwrapped.state_dict()
    safe = name.endswith(".safetensors")
    loaded: dict[str, Any] | None = None
    if safe:
        specs = reader.tensor_specs(name)
    else:
        # Mapped: its tensors' data are read only when load_state_dict copies them. A file in
        # torch's legacy (pre-zip) format cannot be mapped, and is read whole.
        try:
            loaded = dict(reader.load(name, mmap=True))
        except CheckpointError:
            loaded = dict(reader.load(name))
        specs = {
            k: (tuple(v.shape), str(v.dtype)) for k, v in loaded.items() if hasattr(v, "shape")
        }
    prefixed = _prefixed(specs, current)
    if prefixed:
        notes.append(
            f"{name} carries the DistributedDataParallel wrapper's key names (module.*), as "
            "accelkw 0.2 saved them: loaded without the prefix; a new save_state writes "
            "Accelerate's names"
        )
        specs = _unprefixed(specs)
    # A tied weight's second name is not in a safetensors file (either framework's), nor a
    # view of part of a buffer the file holds whole: they take their values from it.
    filled = alias_sources(current, specs.keys())
    _check_weights(path, unwrapped, current, specs, filled, bool(model_kwargs.get("strict", True)))

    def apply() -> None:
        weights = loaded if loaded is not None else reader.load_tensors(name)
        if prefixed:
            weights = _unprefixed(weights)
        unwrapped.load_state_dict(with_aliases(weights, current), **model_kwargs)

    return apply


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
        # A contribution's own read checks what it reads; its apply is the weights' stage.
        read.steps.append(
            _Step(
                "the models and optimizers",
                store[0].read_checkpoint(reader, what.models, what.optimizers),
                None,
                weights=True,
            )
        )
        return
    contributed = state.values(MODEL_STATE)
    # The weights' files are hashed on a thread while the optimizers' states are read (each
    # hashed as it is read), then their headers are checked: both streams at once.
    hashing = None if contributed else _verify_early(reader, len(what.models))
    try:
        _read_optimizers(reader, what, load_kwargs, read)
    finally:
        if hashing is not None:
            hashing()
    for i, (model, unwrapped) in enumerate(zip(what.models, what.unwrapped, strict=True)):
        label = f"model {i} ({type(unwrapped).__name__})"
        if contributed:
            _, weights = _read_model(reader, i)
            apply = _bind(contributed[0].load_state_dict, model, weights)
        else:
            apply = _checked_model(reader, i, unwrapped, model_kwargs, read.notes)
        read.steps.append(_Step(label, apply, None, weights=True))


def _verify_early(reader: FolderReader, models: int) -> Callable[[], None]:
    """Check the weights' files on a thread; what this returns waits for it (and raises what
    it raised)."""
    from concurrent.futures import ThreadPoolExecutor

    def verify() -> None:
        for i in range(models):
            reader.verify(_model_file(reader, i))

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkw-check")
    try:
        future = pool.submit(verify)
    finally:
        pool.shutdown(wait=False)
    return future.result


def _read_optimizers(
    reader: FolderReader, what: Checkpointed, load_kwargs: dict[str, Any], read: _Read
) -> None:
    for i, optimizer in enumerate(what.optimizers):
        name = numbered("optimizer.bin", i)
        saved = reader.load(name, **load_kwargs)
        _check_optimizer(reader.folder / name, optimizer, saved)
        read.steps.append(
            _Step(
                f"optimizer {i}",
                _bind(optimizer.load_state_dict, saved),
                _kept_optimizer(optimizer),
                order=1,
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
        keep = _kept_stateful(obj)
        # An owner without a state dict cannot be restored by the runtime: it is applied
        # after every object that can, so that only it is left to undo its own part.
        read.steps.append(_Step(f"handler {key!r}", found, keep, order=0 if keep else 2))
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
    hooks: Sequence[LoadStateHook], reader: FolderReader, manifest: Any, what: Checkpointed
) -> Checkpointed:
    """Check every file, then call the load-state pre-hooks with the models as given to
    ``prepare``; returns what is left for the core to load (the models no hook popped).

    No copy of the models is kept: a hook that raises leaves what it had loaded into them.
    """
    if manifest is not None:
        # A hook reads the files it saved itself: each is checked before any hook runs.
        for name in sorted(manifest.files):
            reader.verify(name)
    models = list(what.given)
    for hook in hooks:
        try:
            hook(models, str(reader.folder))
        except Exception as exc:
            name = getattr(hook, "__qualname__", type(hook).__name__)
            raise CheckpointError(
                f"load_state pre-hook {name}",
                f"failed ({_first_line(exc)}); nothing else was loaded (what the hook itself "
                "had loaded into a model is not undone)",
            ) from exc
    left = {id(m) for m in models}
    kept = [
        (m, u, g)
        for m, u, g in zip(what.models, what.unwrapped, what.given, strict=True)
        if id(g) in left
    ]
    return Checkpointed(
        [m for m, _, _ in kept],
        what.optimizers,
        what.schedulers,
        what.data_loaders,
        what.custom,
        what.step,
        unwrapped=[u for _, u, _ in kept],
        given=[g for _, _, g in kept],
    )


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


def _apply_weights(steps: list[_Step], folder: Path) -> CheckpointError | None:
    """Copy the checked weights in, the last stage: no way back is kept (it would cost a copy
    of every model); a failure says which were applied."""
    done: list[str] = []
    for step in steps:
        try:
            step.apply()
        except Exception as exc:
            applied = ", ".join(done) if done else "none"
            error = CheckpointError(
                folder,
                f"could not be loaded into {step.label} ({_first_line(exc)}); every other "
                f"object was loaded, and the weights of {applied} before it: load a "
                "checkpoint again before training on",
            )
            error.__cause__ = exc
            return error
        done.append(step.label)
    return None


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

    ``hooks`` (``register_load_state_pre_hook``'s) are called with the models as given to
    ``prepare`` and the folder once every file of the checkpoint is checked; the models they
    pop are not loaded here.

    Every process checks everything it will apply (files, keys, shapes, states) and the
    processes agree before anything is changed. Then the objects other than the weights are
    applied, each with a way back (a copy of a small state; an optimizer's state, which a load
    replaces and never overwrites), and the processes agree again: an object that refuses its
    state on any process has every object restored, on every process. The weights come last,
    copied into the models with no copy kept: checked already, only a model's own
    ``load_state_dict`` refusing them, or the disk failing under the read, can fail them, and
    then the error says what was loaded.

    Returns the saved ``step``, or ``None`` when this process's random states were not in an
    Accelerate checkpoint (a warning says so). Raises :class:`CheckpointError`.
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
    reader = FolderReader(folder, manifest, state)
    if hooks:
        try:
            what = _run_hooks(hooks, reader, manifest, what)
        except BaseException as exc:
            error = exc
    # Agreed whether this process has hooks or not: a hook registered on some processes only
    # (the main one) never changes the sequence of collectives.
    agree(state, error)
    read = _Read()
    try:
        read = _read_all(reader, state, what, dict(load_kwargs or {}), dict(model_kwargs or {}))
    except BaseException as exc:
        error = exc
    agree(state, error)
    # Small states first, then the optimizers' (restorable), then what only restores itself.
    stage = sorted((s for s in read.steps if not s.weights), key=lambda s: s.order)
    undo, refused, error = _apply(stage, folder)
    if error is not None:
        _restore(undo, refused, error)
    # Every process gets here, whatever happened: another process's failure makes this one go
    # back too (its own is restored above).
    _agree_or_restore(state, error, [] if error is not None else undo, folder)
    del undo, refused  # the optimizers' replaced states are let go before the weights are read
    error = _apply_weights([s for s in read.steps if s.weights], folder)
    agree(state, error)
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
