"""Checkpoints of a run: ``save_state``, ``load_state``, ``save_model`` and what they hold.

:class:`Checkpoints` is the ``Accelerator``'s collaborator for them, with the
``ProjectConfiguration`` that places them (``project_dir``, automatic naming, ``total_limit``)
and the objects registered with ``register_for_checkpointing``. The files and their guarantees
are :mod:`accelkw_core.runtime.checkpoints`'.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from accelkw_core.contract.contributions import CheckpointExecutor
from accelkw_core.contract.points import CHECKPOINT_EXECUTOR, MODEL_CHECKPOINT, MODEL_STATE
from accelkw_core.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWarning,
    ConfigError,
)
from accelkw_core.runtime.checkpoints.agreement import (
    agree,
    everyone_here,
    exchange,
    prepare_presence_check,
)
from accelkw_core.runtime.checkpoints.atomic_folders import remove_tree, save_target
from accelkw_core.runtime.checkpoints.background_save import BackgroundSave
from accelkw_core.runtime.checkpoints.layout import Checkpointed
from accelkw_core.runtime.checkpoints.load import LoadStateHook, load_checkpoint
from accelkw_core.runtime.checkpoints.parts import inbox_of, save_identity
from accelkw_core.runtime.checkpoints.pretrained import save_pretrained
from accelkw_core.runtime.checkpoints.project import (
    ProjectConfiguration,
    is_complete,
    numbered_checkpoints,
)
from accelkw_core.runtime.checkpoints.save import (
    PendingSave,
    SaveStateHook,
    begin_save,
    committer,
    model_state_dict,
    run_save_hooks,
    write_own_part,
)

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from accelkw_core.runtime.run_state import RunState

__all__ = ["Checkpoints", "project_configuration"]

logger = logging.getLogger("accelkw.checkpoint")


class PreparedObjects(Protocol):
    """What the run prepared, as its checkpoints read it (the runtime's ``Prepared``)."""

    models: list[tuple[Any, Any]]
    optimizers: list[Any]
    schedulers: list[Any]
    data_loaders: list[Any]
    custom: list[Any]

    def unwrap(
        self, model: Any, keep_fp32_wrapper: bool = ..., keep_torch_compile: bool = ...
    ) -> Any: ...


class StepCounter(Protocol):
    """Where the run's step is kept (the runtime's ``GradientState``)."""

    step: int


H = TypeVar("H")


def project_configuration(
    project_dir: str | os.PathLike[str] | None, project_config: ProjectConfiguration | None
) -> ProjectConfiguration:
    """The run's configuration from ``Accelerator(project_dir=, project_config=)``, as Accelerate."""
    if project_config is not None and not isinstance(project_config, ProjectConfiguration):
        raise ConfigError(
            "accelerator", "project_config", project_config, "a ProjectConfiguration or None"
        )
    config = project_config if project_config is not None else ProjectConfiguration()
    if project_dir is not None and config.project_dir is None:
        config.set_directories(project_dir)
    return config


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _warn_prune(message: str) -> None:
    # Raised from save_state, or from the thread that commits a background save.
    warnings.warn(f"save_state: {message}", CheckpointWarning, stacklevel=4)


def _directory(value: Any, what: str) -> Path:
    if value is None or (isinstance(value, str) and not value):
        raise ConfigError(
            "accelerator",
            what,
            value,
            "a directory path (or ProjectConfiguration(automatic_checkpoint_naming=True) "
            "with a project_dir)",
        )
    try:
        return Path(os.path.expanduser(os.fspath(value)))
    except TypeError:
        raise ConfigError(
            "accelerator", what, value, "a directory path (str or os.PathLike)"
        ) from None


def _registered(hooks: OrderedDict[int, H], hook: H, what: str) -> RemovableHandle:
    if not callable(hook):
        raise ConfigError("accelerator", what, hook, "a callable")
    from torch.utils.hooks import RemovableHandle

    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


class Checkpoints:
    """Saves and loads what ``prepared`` holds, with ``gradient_state``'s step, where
    ``project_configuration`` says."""

    def __init__(
        self,
        state: RunState,
        gradient_state: StepCounter,
        prepared: PreparedObjects,
        project_configuration: ProjectConfiguration,
    ) -> None:
        self.state = state
        self.gradient_state = gradient_state
        self.prepared = prepared
        #: ``Accelerator.project_configuration``.
        self.project_configuration = project_configuration
        # Keyed by their handles' ids, as torch.utils.hooks.RemovableHandle removes them (it
        # keeps a weak reference to the dict, which a plain dict cannot have).
        self._save_hooks: OrderedDict[int, SaveStateHook] = OrderedDict()
        self._load_hooks: OrderedDict[int, LoadStateHook] = OrderedDict()
        # How many saves of each folder this process made at the current step: with the
        # step, the identity of a save, the same on every process without a collective.
        self._saves_at_step: tuple[int, dict[str, int]] = (-1, {})
        self._numbered: ProjectConfiguration | None = None
        self._continue_numbering()
        if self._sharded():
            prepare_presence_check(state)  # sharded saves are collectives: see _save_sharded

    def _continue_numbering(self) -> None:
        """With automatic naming, continue after the newest folder present, once per run.

        Read as the run starts, never at a save: a process reaching ``save_state`` after the
        main process committed would otherwise see that folder and name the next one.
        """
        config = self.project_configuration
        if (
            self._numbered is config
            or not config.automatic_checkpoint_naming
            or config.project_dir is None
        ):
            return
        self._numbered = config  # a configuration set later is read at its first save
        present = numbered_checkpoints(config.checkpoints_dir())
        # A restarted run continues after the newest folder, whatever iteration it was given.
        if present:
            config.iteration = max(config.iteration, present[-1][0] + 1)

    def _identity(self, folder: Path) -> str:
        step = self.gradient_state.step
        at, counts = self._saves_at_step
        if at != step:
            counts = {}
            self._saves_at_step = (step, counts)
        key = str(folder)
        count = counts.get(key, 0)
        counts[key] = count + 1
        return save_identity(step, count)

    def register_save_state_pre_hook(self, hook: SaveStateHook) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` in every ``save_state``; its handle."""
        return _registered(self._save_hooks, hook, "register_save_state_pre_hook")

    def register_load_state_pre_hook(self, hook: LoadStateHook) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` in every ``load_state``; its handle."""
        return _registered(self._load_hooks, hook, "register_load_state_pre_hook")

    def _next_checkpoint(self) -> Path:
        config = self.project_configuration
        parent = config.checkpoints_dir()
        self._continue_numbering()
        return parent / f"checkpoint_{config.iteration}"

    def _prune(self) -> None:
        """Remove the checkpoints beyond ``total_limit``, oldest first; best effort.

        The newest ``total_limit`` complete checkpoints are kept and every numbered folder
        older than them is removed (one a removal cut short left incomplete included, so it is
        tried again). A folder that cannot be removed is one warning naming it and is tried
        again at the next save: the new checkpoint is saved whatever happens here, and nothing
        is raised, so the processes (only the main one prunes) never part ways over it.
        """
        limit = self.project_configuration.total_limit
        if limit is None:
            return
        try:
            present = numbered_checkpoints(self.project_configuration.checkpoints_dir())
            complete = [number for number, path in present if is_complete(path)]
        except Exception as exc:
            _warn_prune(f"could not list the checkpoints to prune ({_one_line(exc)})")
            return
        if len(complete) <= limit:
            return
        oldest_kept = complete[-limit]
        for number, old in present:
            if number >= oldest_kept:
                break
            logger.info("total_limit=%d: removing %s", limit, old)
            try:
                remove_tree(old)
                remove_tree(inbox_of(old))
            except Exception as exc:
                _warn_prune(
                    f"total_limit={limit}: could not remove {old} ({_one_line(exc)}); "
                    "it is tried again at the next save"
                )

    def save_state(
        self, output_dir: Any, safe_serialization: bool, **save_model_func_kwargs: Any
    ) -> Path:
        """Save the run into ``output_dir`` (or the next automatically named folder); returns it.

        The folder appears complete or not at all (``Accelerator.save_state``). Replicated
        state is saved without any collective: called on some processes only (the main one,
        as diffusers' scripts do), it saves what they hold, and no process waits for another.
        """
        config = self.project_configuration
        if config.automatic_checkpoint_naming:
            folder = self._next_checkpoint()
        else:
            folder = save_target(_directory(output_dir, "output_dir"))
        if self._sharded():
            notes = self._save_sharded(folder, safe_serialization)
        else:
            notes = self._save_replicated(folder, safe_serialization)
        for note in notes:
            # this method, Accelerator.save_state, its caller
            warnings.warn(f"save_state: {note}", CheckpointWarning, stacklevel=3)
        config.iteration += 1
        return folder

    def _sharded(self) -> bool:
        return bool(self.state.values(MODEL_STATE)) or bool(self.state.values(MODEL_CHECKPOINT))

    def _save_sharded(self, folder: Path, safe_serialization: bool) -> list[str]:
        """A collective save, as in Accelerate: every process must call it."""
        # Before the first collective of the save: a process that is not saving is named in a
        # clear error, rather than the others waiting in a collective it never enters.
        everyone_here(self.state, f"save_state({str(folder)!r}) of sharded state")
        return self._save(folder, safe_serialization, collective=True)

    def _save_replicated(self, folder: Path, safe_serialization: bool) -> list[str]:
        """The shared part committed by its committing process, the others' own parts."""
        save = self._identity(folder)
        config = self.project_configuration
        if committer(self.state, config.save_on_each_node):
            return self._save(folder, safe_serialization, collective=False, save=save)
        what = self.checkpointed()
        if self._save_hooks:
            # As in Accelerate, the hooks run on every process that saves; only the committing
            # process's temporary folder is committed, so here they get the folder itself.
            weights = [
                model_state_dict(self.state, model, unwrapped)
                for model, unwrapped in zip(what.models, what.unwrapped, strict=True)
            ]
            run_save_hooks(list(self._save_hooks.values()), what.given, weights, folder)
        write_own_part(self.state, folder, what, save)
        return []

    def _save(
        self,
        folder: Path,
        safe_serialization: bool,
        *,
        collective: bool,
        save: str | None = None,
    ) -> list[str]:
        """Save into ``folder``; the notes for warnings. ``collective``: every process takes
        part and agrees (sharded state); else this process commits alone."""
        config = self.project_configuration
        what = self.checkpointed()
        weights = (
            []
            if self.state.values(MODEL_CHECKPOINT)
            else [
                model_state_dict(self.state, model, unwrapped)
                for model, unwrapped in zip(what.models, what.unwrapped, strict=True)
            ]
        )
        logger.info("saving the run's state to %s", folder)
        begin = functools.partial(
            begin_save,
            self.state,
            folder,
            what,
            weights,
            safe_serialization=safe_serialization,
            save_on_each_node=config.save_on_each_node,
            hooks=list(self._save_hooks.values()),
            collective=collective,
            save=save,
        )
        executors = self.state.values(CHECKPOINT_EXECUTOR)
        if executors:
            return self._submit(
                executors[0], folder, functools.partial(begin, staged=True), collective
            )
        pending = begin()
        pending.complete()
        if config.automatic_checkpoint_naming and self.state.is_main_process:
            self._prune()
        return pending.notes

    def _submit(
        self,
        executor: CheckpointExecutor,
        folder: Path,
        begin: Callable[..., PendingSave],
        collective: bool,
    ) -> list[str]:
        """Hand the save to the ``checkpoint_executor``: staged now, committed where it says;
        the notes of the staging."""
        automatic = self.project_configuration.automatic_checkpoint_naming

        def after_commit() -> None:
            if automatic:
                self._prune()  # only once the new checkpoint is committed

        job = BackgroundSave(self.state, folder, begin, after_commit, collective=collective)
        executor.submit(job)
        return job.notes

    def wait_for_checkpoints(self, *, agreed: bool = True) -> None:
        """Wait for the ``checkpoint_executor``'s pending saves; raises a failed one's error.

        ``agreed`` (a call every process makes on the normal path: ``load_state``,
        ``wait_for_everyone``, ``end_training``): the processes agree on the outcome before
        any raises, so all raise (this process's own error, else the first failed process's)
        or none does. Without it (a failure or exit path), this process waits for its own
        saves only, never for another process, and raises its own failure. Ctrl-C while
        waiting is raised at once, as it is, and the save goes on.
        """
        executors = self.state.values(CHECKPOINT_EXECUTOR)
        if not executors:
            return
        error: Exception | None = None
        try:
            for executor in executors:
                executor.wait()
        except Exception as exc:
            error = exc
        if agreed:
            agree(self.state, error)
        elif error is not None:
            raise error

    def _agreed_folder(self, folder: Path, missing: CheckpointNotFoundError | None = None) -> Path:
        """The folder the main process chose; raised on every process when it found none.

        Every process must use the folder the main process chose (automatic naming reads the
        file system, which another process may already have changed).
        """
        mine = (str(folder), None if missing is None else missing.problem)
        chosen, problem = exchange(self.state, mine)[0]
        if problem is not None:
            raise missing or CheckpointNotFoundError(chosen, problem)
        return Path(chosen)

    def load_state(
        self,
        input_dir: Any,
        load_kwargs: dict[str, Any] | None,
        **load_model_func_kwargs: Any,
    ) -> int | None:
        """Load ``input_dir`` (or the newest complete checkpoint) whole or not at all.

        Returns the step the checkpoint recorded (``None`` when it recorded none), for the
        caller to set.
        """
        self.wait_for_checkpoints()
        missing: CheckpointNotFoundError | None = None
        if input_dir is not None:
            folder = _directory(input_dir, "input_dir")
        elif self.project_configuration.automatic_checkpoint_naming:
            try:
                folder = self._newest_complete()
            except CheckpointNotFoundError as exc:
                # The main process's finding decides (the others load what it chose), and
                # every process raises it.
                folder, missing = exc.path, exc
        else:
            raise ConfigError(
                "accelerator",
                "input_dir",
                None,
                "a checkpoint folder (or ProjectConfiguration(automatic_checkpoint_naming=True) "
                "to load the newest)",
            )
        folder = self._agreed_folder(folder, missing)
        logger.info("loading the run's state from %s", folder)
        return load_checkpoint(
            self.state,
            folder,
            self.checkpointed(),
            load_kwargs=load_kwargs,
            model_kwargs=load_model_func_kwargs,
            hooks=list(self._load_hooks.values()),
        )

    def _newest_complete(self) -> Path:
        parent = self.project_configuration.checkpoints_dir()
        found = numbered_checkpoints(parent)
        for _, path in reversed(found):
            if is_complete(path):
                return path
            warnings.warn(
                f"load_state: skipping {path}, which is incomplete",
                CheckpointWarning,
                stacklevel=4,  # this method, load_state, Accelerator.load_state, its caller
            )
        raise CheckpointNotFoundError(parent, "holds no complete checkpoint to load")

    def save_model(
        self,
        model: Any,
        save_directory: Any,
        max_shard_size: int | str,
        safe_serialization: bool,
    ) -> None:
        """Write ``model``'s unwrapped weights in Accelerate's layout, on the main process."""
        folder = _directory(save_directory, "save_directory")
        if folder.is_file():
            raise CheckpointError(folder, "should be a directory, not a file")
        weights = self.get_state_dict(model)
        if not self.state.is_main_process:
            return
        save_pretrained(
            weights,
            folder,
            max_shard_size=max_shard_size,
            safe_serialization=safe_serialization,
        )

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Add ``objects`` to what the run saves and loads, after checking they can be."""
        invalid = [
            f"- Item at index {i}, `{type(obj).__name__}`"
            for i, obj in enumerate(objects)
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))
        ]
        if invalid:
            raise ValueError(
                "All `objects` must include a `state_dict` and `load_state_dict` function to be "
                "stored. The following inputs are invalid:\n" + "\n".join(invalid)
            )
        self.prepared.custom.extend(objects)

    def get_state_dict(self, model: Any, unwrap: bool = True) -> dict[str, Any]:
        """``model``'s weights (``unwrap``: read without the handlers' wrappers)."""
        unwrapped = self.prepared.unwrap(model) if unwrap else model
        return model_state_dict(self.state, model, unwrapped)

    def checkpointed(self) -> Checkpointed:
        """What a checkpoint of the run holds now."""
        prepared = self.prepared
        return Checkpointed(
            [wrapped for wrapped, _ in prepared.models],
            prepared.optimizers,
            prepared.schedulers,
            prepared.data_loaders,
            prepared.custom,
            self.gradient_state.step,
            # Without torch.compile's wrapper too: its state dict's names carry `_orig_mod.`,
            # which Accelerate's checkpoints (of the models as given to prepare) do not.
            unwrapped=[
                prepared.unwrap(wrapped, keep_torch_compile=False) for wrapped, _ in prepared.models
            ],
            given=[original for _, original in prepared.models],
        )
