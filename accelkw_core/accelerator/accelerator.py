"""``Accelerator``: the training-loop API over a state composed from handlers and configuration.

The class holds the run (its settings, composed handlers, state and gradient state) and
forwards each member of Accelerate's API, in one line, to a collaborator of the runtime with one
job, as Lightning's Fabric delegates to its strategy and precision: :class:`Preparation`
(``prepare``), :class:`Stepping` (``autocast``, ``backward``, ``accumulate``, clipping),
:class:`Checkpoints`, :class:`Trackers`, :class:`DataLoading`, :class:`Processes`,
:class:`Profiling` and :class:`Extras`, which share one record of what was prepared
(:class:`Prepared`), and :class:`Shutdown` (``end_training``). None of them knows the
``Accelerator``; :func:`~accelkw_core.accelerator.assembly.assemble` builds them.

Nothing here imports torch at module import time; every method that needs it imports it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from accelkw_core.accelerator.assembly import assemble
from accelkw_core.discovery.registry import Registry
from accelkw_core.log_setup import configure_from_env
from accelkw_core.runtime.checkpoints.load import LoadStateHook
from accelkw_core.runtime.checkpoints.project import ProjectConfiguration
from accelkw_core.runtime.checkpoints.save import SaveStateHook
from accelkw_core.runtime.composing.missing_capabilities import check_composed_run
from accelkw_core.runtime.data.dataloader_config import DataLoaderConfiguration
from accelkw_core.runtime.processes.coordination import DistributedType
from accelkw_core.runtime.run_state import make_current
from accelkw_core.tracking.selection import LogWith

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

    from accelkw_core.contract.handler import KwargsHandler
    from accelkw_core.contract.tracker import GeneralTracker

__all__ = ["Accelerator"]

T = TypeVar("T")


class Accelerator:
    """Compose the installed handlers, the config and the code's handlers into one run.

    ``mixed_precision`` (``"no"``, ``"fp16"``, ``"bf16"``; ``"fp8"`` with a handler that
    provides it, such as accelkw-fp8's) and ``cpu`` left at ``None`` come from
    ``ACCELKW_MIXED_PRECISION``/``ACCELKW_CPU``, then the config file, then ``"no"``/``False``.
    ``kwargs_handlers`` are handler instances; their explicit fields win over the environment
    and the config (``config``: a path; otherwise ``ACCELKW_CONFIG``, ``./accelkw.toml`` or
    ``./pyproject.toml [tool.accelkw]``). Every other enabled installed handler is applied with
    its configured or default values. ``registry`` replaces the process-wide plugin registry.
    ``project_dir``/``project_config`` (a :class:`ProjectConfiguration`) place checkpoints and
    logs, as in Accelerate. ``dataloader_config`` (a :class:`DataLoaderConfiguration`) says how
    prepared data loaders shard. ``log_with`` names installed trackers (``"tensorboard"``, a list,
    ``"all"``) or passes ``GeneralTracker`` instances; see :meth:`init_trackers`.

    Other keywords are Accelerate's (``gradient_accumulation_steps=4``, ``fsdp_plugin=...``,
    ``dynamo_backend="inductor"``): each is taken by the installed handler that claims it
    (``accelerator_keywords``), and one no handler claims names the distribution to install.

    Use it as a context manager, or call :meth:`end_training`, to run every teardown once
    (a process group a handler created is destroyed).
    """

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool | None = None,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        config: str | os.PathLike[str] | None = None,
        *,
        project_dir: str | os.PathLike[str] | None = None,
        project_config: ProjectConfiguration | None = None,
        log_with: LogWith = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        registry: Registry | None = None,
        **keywords: Any,
    ) -> None:
        configure_from_env()
        run = assemble(
            mixed_precision,
            cpu,
            kwargs_handlers,
            config,
            project_dir=project_dir,
            project_config=project_config,
            log_with=log_with,
            dataloader_config=dataloader_config,
            registry=registry,
            keywords=keywords,
        )
        self.settings = run.settings
        self.handlers = run.handlers
        self.state = run.state
        self.gradient_state = run.gradient_state
        # The collaborators (accelkw_core.accelerator.assembly built them), one job each.
        self._prepared = run.prepared
        self._data = run.data
        self._preparation = run.preparation
        self._stepping = run.stepping
        self._checkpoints = run.checkpoints
        self._trackers = run.trackers
        self._processes = run.processes
        self._profiling = run.profiling
        self._extras = run.extras
        self._shutdown = run.shutdown
        #: Whether a forward runs under autocast (mixed precision ``fp16``/``bf16``/``fp8``), as
        #: Accelerate's attribute; scripts set it to ``False`` on MPS, which changes nothing here.
        self.native_amp: bool = self.state.mixed_precision in ("fp16", "bf16", "fp8")
        try:
            check_composed_run(self.state, run.registry, self.settings.disabled)
        except BaseException:
            self._shutdown.end(agreed=False)  # a failure path: no collective
            raise
        # Built: accelkw_core.state's RunState()/PartialState() and get_logger's
        # loggers read this run from now on (a failed construction leaves the previous one).
        make_current(self.state, self.gradient_state)

    # -- facts ---------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """The device of this process (``cpu``, or ``cuda:LOCAL_RANK``)."""
        return self.state.device

    @property
    def mixed_precision(self) -> str:
        return self.state.mixed_precision

    @property
    def process_index(self) -> int:
        """The global rank of this process."""
        return self.state.rank

    @property
    def local_process_index(self) -> int:
        """The rank of this process on its machine."""
        return self.state.local_rank

    @property
    def num_processes(self) -> int:
        """The world size."""
        return self.state.world_size

    @property
    def is_main_process(self) -> bool:
        """Whether this is global rank 0."""
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is rank 0 on its machine."""
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """Whether this is the last global rank (``num_processes - 1``)."""
        return self.state.is_last_process

    @property
    def distributed_type(self) -> DistributedType:
        """``NO``, ``MULTI_CPU``, ``MULTI_GPU``, ... (Accelerate's ``DistributedType``)."""
        return self._processes.distributed_type

    @property
    def use_distributed(self) -> bool:
        """Whether this run has several processes (Accelerate's ``use_distributed``)."""
        return self._processes.use_distributed

    # -- preparing (Preparation) -----------------------------------------------------------------

    def prepare(self, *objects: Any) -> Any:
        """Prepare models, optimizers and data loaders for this run; other objects pass through.

        Models move to :attr:`device`, their forward runs under the ``forward_context``
        contributions (autocast), and they pass through each ``model_wrapper`` in order (DDP);
        optimizers pass through each ``optimizer_wrapper`` and step through the ``around_step``
        and ``after_step`` contributions; data loaders are sharded across processes. Returns one object for one argument, else a tuple
        in the order given.
        """
        return self._preparation.prepare(*objects)

    def prepare_model(self, model: Any) -> Any:
        """``model`` on :attr:`device`, its forward under the forward contexts, then wrapped."""
        return self._preparation.prepare_model(model)

    def prepare_optimizer(self, optimizer: Any) -> Any:
        """``optimizer`` through every optimizer wrapper, stepping through the step chain."""
        return self._preparation.prepare_optimizer(optimizer)

    def prepare_scheduler(self, scheduler: Any) -> Any:
        """``scheduler`` stepping only when its optimizer really stepped (Accelerate's rules)."""
        return self._preparation.prepare_scheduler(scheduler)

    def unwrap_model(
        self, model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> Any:
        """The model as it was before the handlers' wrappers (DDP, ...) were applied.

        With ``keep_fp32_wrapper=False`` its forward no longer runs under the forward contexts.
        With ``keep_torch_compile=True`` (Accelerate's default) a model that was compiled comes
        back compiled: the ``torch.compile`` wrapper when it wraps the model itself. When it
        wraps another wrapper (DDP), the model comes back uncompiled with a warning, where
        Accelerate rewires the prepared model to skip that wrapper (docs/migrating.md).
        """
        return self._prepared.unwrap(model, keep_fp32_wrapper, keep_torch_compile)

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object, collect garbage, empty the CUDA cache; returns ``None``s.

        Call it between two trainings with different models; ``objects`` come back as ``None``
        so ``model, optimizer = accelerator.free_memory(model, optimizer)`` drops them.
        """
        return self._preparation.free_memory(*objects)

    def clear(self, *objects: Any) -> list[Any]:
        """Alias of :meth:`free_memory`."""
        return self.free_memory(*objects)

    # -- the step (Stepping) ---------------------------------------------------------------------

    def autocast(self, autocast_handler: Any = None) -> AbstractContextManager[Any]:
        """The forward contexts (autocast) around a block; nothing to enter when none applies.

        ``autocast_handler`` (a handler such as ``AutocastKwargs(enabled=False)``) replaces
        them for this block: its plan on this run's facts gives the contexts to enter.
        """
        return self._stepping.autocast(autocast_handler)

    def backward(self, loss: Any, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, or the ``backward`` contribution (loss scaling).

        The loss is divided by :attr:`gradient_accumulation_steps` first, as in Accelerate,
        then passed through every ``loss`` contribution in composition order (observers and
        transforms, on every rank), then backpropagated.
        """
        self._stepping.backward(loss, **kwargs)

    @property
    def sync_gradients(self) -> bool:
        """Whether this micro-step syncs gradients and steps the optimizer."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-steps per optimizer step (1 without an accumulation policy)."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, value: int) -> None:
        self.gradient_state.num_steps = value

    @property
    def step(self) -> int:
        """The micro-step counter ``accumulate()`` advances (Accelerate's ``accelerator.step``)."""
        return self.gradient_state.step

    @step.setter
    def step(self, value: int) -> None:
        self.gradient_state.step = value

    def no_sync(self, model: Any) -> AbstractContextManager[None]:
        """Hold back gradient synchronisation of ``model`` (a prepared model) in the block.

        Enters the ``no_sync`` contribution; without one, the model's own ``no_sync()`` when
        the run is distributed (DDP), else nothing, as Accelerate does.
        """
        return self._stepping.no_sync(model)

    def accumulate(self, *models: Any) -> AbstractContextManager[None]:
        """One micro-step of gradient accumulation.

        Sets :attr:`sync_gradients` from the accumulation policy (every
        ``gradient_accumulation_steps``-th micro-step, and the last batch of a prepared data
        loader, sync); on the others, ``models`` hold back gradient synchronisation and the
        prepared optimizers' ``step()`` and ``zero_grad()`` do nothing.
        """
        return self._stepping.accumulate(*models)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide the gradients of ``optimizer`` (default: every prepared one) by the loss scale.

        Through the ``unscale_gradients`` contribution; nothing happens when no handler scales
        losses.
        """
        self._stepping.unscale_gradients(optimizer)

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether a prepared optimizer skipped its last step (a loss scaler found inf/NaN)."""
        return self._stepping.optimizer_step_was_skipped

    def clip_grad_norm_(
        self, parameters: Iterable[Any], max_norm: float, norm_type: float = 2
    ) -> Any:
        """``torch.nn.utils.clip_grad_norm_`` after unscaling; returns the total norm."""
        return self._stepping.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        """``torch.nn.utils.clip_grad_value_`` after unscaling."""
        self._stepping.clip_grad_value_(parameters, clip_value)

    # -- what handlers contribute (Extras) and the profiler (Profiling) --------------------------

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The gradient scaler a handler contributes (Accelerate's ``accelerator.scaler``)."""
        return self._extras.scaler

    @property
    def extras(self) -> Mapping[str, object]:
        """What handlers contribute to the ``attribute`` point, by name (read-only).

        A plugin exports a typed accessor over it (``accelkw_ema.ema_of(accelerator)``), or
        code reads it with :meth:`extra`, so a type checker knows what it gets.
        """
        return self._extras.extras

    def extra(self, name: str, kind: type[T]) -> T:
        """The object a handler contributed as ``name``, checked to be a ``kind``.

        Raises :class:`~accelkw_core.errors.AccelkwError` naming the installed contributions
        when there is none of that name, and ``TypeError`` when it is not a ``kind``.
        """
        return self._extras.extra(name, kind)

    def profile(self, profile_handler: Any = None) -> AbstractContextManager[Any]:
        """Profile the block; yields the profiler (call ``.step()`` once per training step).

        ``profile_handler`` replaces the configured profiler for this block. With no profiler
        configured the block runs unprofiled, with a warning, and ``step()`` does nothing.
        """
        return self._profiling.profile(profile_handler)

    # -- data loaders (DataLoading; Accelerate reads these from ``dataloader_config``) -----------

    @property
    def dataloader_config(self) -> DataLoaderConfiguration:
        """How prepared data loaders shard (``Accelerator(dataloader_config=...)``)."""
        return self._data.config

    @dataloader_config.setter
    def dataloader_config(self, value: DataLoaderConfiguration) -> None:
        self._data.config = value

    @property
    def split_batches(self) -> bool:
        return self._data.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self._data.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self._data.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self._data.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        return self._data.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self._data.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        return self._data.use_stateful_dataloader

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """``dataloader`` without its first ``num_batches`` batches (to resume mid-epoch)."""
        return self._data.skip_first_batches(dataloader, num_batches)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather ``input_data`` from every process, without the samples repeated at the end.

        On the last batch of a prepared data loader, the samples added to complete the last
        round are dropped, so each sample counts once. Anything that is not a tensor (or a
        nested list/tuple/dict of tensors), or ``use_gather_object=True``, is gathered as
        Python objects into one list.
        """
        return self._data.gather_for_metrics(input_data, use_gather_object)

    # -- processes (Processes) -------------------------------------------------------------------

    def gather(self, data: Any) -> Any:
        """Tensors of every process concatenated on dim 0 (nested lists/tuples/dicts too)."""
        return self._processes.gather(data)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """The ``"sum"``, ``"mean"`` or ``"max"`` of ``tensor`` over every process, as a new tensor.

        Nested lists, tuples and dicts of tensors are reduced leaf by leaf; ``scale`` applies
        on XLA only, as in Accelerate (accelkw does not run on XLA).
        """
        return self._processes.reduce(tensor, reduction, scale)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (and this process's saves are committed)."""
        self._checkpoints.wait_for_checkpoints()
        self._processes.barrier()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        self._processes.print(*args, **kwargs)

    def set_trigger(self) -> None:
        """Raise this process's trigger; :meth:`check_trigger` then sees it on every process."""
        self._processes.set_trigger()

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last check that saw one.

        Every process must call it (it sums the triggers across processes); when one was set,
        every process gets ``True`` and the triggers are lowered.
        """
        return self._processes.check_trigger()

    def main_process_first(self) -> AbstractContextManager[None]:
        """The main process runs the block first; the others enter once it has left."""
        return self._processes.main_process_first()

    def local_main_process_first(self) -> AbstractContextManager[None]:
        """The local main process of each machine runs the block first, then the others."""
        return self._processes.local_main_process_first()

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Decorate ``function`` to run on the main process only (``None`` elsewhere)."""
        return self._processes.on_main_process(function)

    def on_local_main_process(
        self, function: Callable[..., Any] | None = None
    ) -> Callable[..., Any]:
        """Decorate ``function`` to run on each machine's local main process only."""
        return self._processes.on_local_main_process(function)

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Callable[..., Any]:
        """Decorate ``function`` to run on process ``process_index`` only (``None`` elsewhere).

        ``@accelerator.on_process(process_index=1)`` or ``accelerator.on_process(fn, 1)``.
        """
        return self._processes.on_process(function, process_index, local=False)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Callable[..., Any]:
        """Decorate ``function`` to run on the process of that local index on each machine."""
        return self._processes.on_process(function, local_process_index, local=True)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorate ``function`` to run on the last process only (``None`` elsewhere)."""
        return self._processes.on_last_process(function)

    def join_uneven_inputs(
        self, joinables: list[Any], even_batches: bool | None = None
    ) -> AbstractContextManager[Any]:
        """Train ``joinables`` (DDP models) on loaders whose processes get different batch counts.

        On several accelerator devices (CUDA), under ``torch.distributed.algorithms.Join`` when
        batches are uneven: ``even_batches`` (default: :attr:`even_batches`) overrides the
        prepared data loaders' for the block. As in Accelerate, the block runs as it is with
        one process, and on CPU processes (with a warning).
        """
        even = self.even_batches if even_batches is None else even_batches
        return self._processes.join_uneven_inputs(joinables, even, self._prepared.data_loaders)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """``tensor`` (or nested tensors) padded with ``pad_index`` along ``dim`` to the largest
        size on any process, at the end (at the start with ``pad_first``), to gather them."""
        return self._processes.pad_across_processes(tensor, dim, pad_index, pad_first)

    def split_between_processes(
        self, inputs: Any, apply_padding: bool = False
    ) -> AbstractContextManager[Any]:
        """This process's contiguous share of ``inputs`` (list, tuple, tensor or dict of them).

        With ``apply_padding`` every share has the same length (the last element repeated).
        """
        return self._processes.split_between_processes(inputs, apply_padding)

    # -- checkpoints (Checkpoints) ---------------------------------------------------------------

    @property
    def project_configuration(self) -> ProjectConfiguration:
        """Where checkpoints and logs go (``Accelerator(project_dir=, project_config=)``)."""
        return self._checkpoints.project_configuration

    @project_configuration.setter
    def project_configuration(self, value: ProjectConfiguration) -> None:
        self._checkpoints.project_configuration = value

    @property
    def project_dir(self) -> str | None:
        """The project folder (``ProjectConfiguration.project_dir``)."""
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        """Where trackers write (``ProjectConfiguration.logging_dir``)."""
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        """The number the next automatically named checkpoint gets."""
        return self.project_configuration.iteration

    def save_state(
        self, output_dir: Any = None, safe_serialization: bool = True, **save_model_func_kwargs: Any
    ) -> Path:
        """Save models, optimizers, schedulers, registered objects, handlers and random states.

        Into ``output_dir``, or, with ``ProjectConfiguration(automatic_checkpoint_naming=True)``,
        into ``<project_dir>/checkpoints/checkpoint_<iteration>``. Weights go to
        ``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``). The
        folder appears complete or not at all: a save interrupted at any instant leaves the
        previous checkpoint of that name untouched. Returns the folder.

        No process waits for another (sharded state, FSDP, apart: every process calls it, as
        in Accelerate). The main process writes and commits the shared part (models,
        optimizers, schedulers, registered objects, the hooks' files; each machine's local
        main with ``save_on_each_node``); every process writes its own random states, loaders'
        positions and step into the save it called, whenever it calls, before or after that
        commit. Called on the main process only (``if accelerator.is_main_process:``), it
        saves the main process's part only, as Accelerate does: every process resumes from it
        at the step it records.
        """
        return self._checkpoints.save_state(
            output_dir, safe_serialization, **save_model_func_kwargs
        )

    def load_state(
        self,
        input_dir: Any = None,
        load_kwargs: dict[str, Any] | None = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        """Load a checkpoint into the prepared objects, and the random states: all or nothing.

        ``input_dir`` is the folder; without it, with automatic checkpoint naming, the newest
        complete checkpoint under ``<project_dir>/checkpoints``. Every file is checked before
        anything is changed: a missing, short or damaged file raises
        :class:`~accelkw_core.errors.CheckpointError` naming it, leaving every object as it was.
        """
        step = self._checkpoints.load_state(input_dir, load_kwargs, **load_model_func_kwargs)
        if step is not None:
            self.gradient_state.step = step

    def wait_for_checkpoints(self) -> None:
        """Wait until every checkpoint ``save_state`` handed to a background writer is committed.

        Raises the :class:`~accelkw_core.errors.CheckpointError` of one that failed (the
        checkpoint saved before it is kept), on every process: call it on every process, which
        agree on the outcome. Without a ``checkpoint_executor`` contribution (``save_state``
        commits before it returns) there is nothing to wait for.
        """
        self._checkpoints.wait_for_checkpoints()

    def save_model(
        self,
        model: Any,
        save_directory: Any,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Save ``model``'s unwrapped weights for ``from_pretrained``-style loading (main process).

        ``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``), split
        into ``model-00001-of-0000N.safetensors`` shards with an index above ``max_shard_size``,
        as Accelerate. Each file is written under a temporary name and renamed into place.
        """
        self._checkpoints.save_model(model, save_directory, max_shard_size, safe_serialization)

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save(obj, f)`` on the main process only (Accelerate's ``accelerator.save``).

        On each machine's local main process with ``ProjectConfiguration(save_on_each_node=True)``;
        ``safe_serialization=True`` writes a dict of tensors as safetensors. A path is written
        under a temporary name and renamed into place. It is what
        ``model.save_pretrained(..., save_function=accelerator.save)`` calls.
        """
        on_each_node = self.project_configuration.save_on_each_node
        self._processes.save(obj, f, safe_serialization, on_each_node)

    def register_save_state_pre_hook(self, hook: SaveStateHook) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` in :meth:`save_state`, before it writes.

        As in Accelerate: ``models`` are the prepared models, ``weights`` a list of their state
        dicts (a hook that saves a model its own way pops its entry, and the models left are
        numbered in order), ``output_dir`` the folder being written, here the checkpoint's
        temporary folder: what the hook writes there is listed in the manifest and committed
        with the rest. Called on every process. ``handle.remove()`` unregisters it.
        """
        return self._checkpoints.register_save_state_pre_hook(hook)

    def register_load_state_pre_hook(self, hook: LoadStateHook) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` in :meth:`load_state`, before it loads.

        As in Accelerate: a hook that loads a model itself pops it from ``models``. Here it
        runs once every file of the checkpoint is checked against its manifest, and what it
        loaded is restored with the rest if the load fails. ``handle.remove()`` unregisters it.
        """
        return self._checkpoints.register_load_state_pre_hook(hook)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` (each with ``state_dict``/``load_state_dict``) with the run."""
        self._checkpoints.register_for_checkpointing(*objects)

    def get_state_dict(self, model: Any, unwrap: bool = True) -> dict[str, Any]:
        """``model``'s weights: through the ``model_state`` contribution, else its state_dict.

        ``unwrap=True`` reads the model without the handlers' wrappers (no ``module.`` prefix).
        """
        return self._checkpoints.get_state_dict(model, unwrap)

    # -- trackers (Trackers) ---------------------------------------------------------------------

    @property
    def log_with(self) -> list[str | GeneralTracker]:
        """What ``log_with`` resolved to: installed tracker names and tracker instances."""
        return self._trackers.log_with

    @log_with.setter
    def log_with(self, value: list[str | GeneralTracker]) -> None:
        self._trackers.log_with = value

    @property
    def trackers(self) -> list[GeneralTracker]:
        """The trackers ``init_trackers`` started, in ``log_with``'s order."""
        return self._trackers.trackers

    @trackers.setter
    def trackers(self, value: list[GeneralTracker]) -> None:
        self._trackers.trackers = value

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Start a run named ``project_name`` in every tracker of ``log_with``.

        ``config`` is stored as the run's hyperparameters; ``init_kwargs`` maps a tracker's
        name to the keyword arguments its constructor takes (``{"tensorboard":
        {"flush_secs": 60}}``). Tracker instances passed to ``log_with`` are started as they are.
        Only the main process starts trackers (Accelerate's semantics).
        """
        self._trackers.init_trackers(
            project_name, config, init_kwargs, logging_dir=self.logging_dir
        )

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The started tracker called ``name`` (its underlying run or writer with ``unwrap``).

        Before ``init_trackers`` (or with no tracker) it is a blank ``GeneralTracker``, whose
        methods do nothing, as in Accelerate; a name no started tracker has is a ``ValueError``.
        """
        return self._trackers.get_tracker(name, unwrap)

    def log(
        self,
        values: dict[str, Any],
        step: int | None = None,
        log_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Write ``values`` at ``step`` to every started tracker.

        ``log_kwargs`` maps a tracker's name to extra keyword arguments for its ``log``. Only
        the main process logs (the others have no started tracker).
        """
        self._trackers.log(values, step, log_kwargs)

    # -- shutdown ------------------------------------------------------------------------------

    def end_training(self) -> None:
        """Finish the trackers, then run every handler's teardown in reverse order, once.

        Later calls do nothing. Called on every process on the normal path, the processes
        agree on the outcome of their background saves (all raise a failed one, or none).
        Called while an exception is unwinding (in a ``finally`` or ``except`` block), as
        ``__exit__``, at interpreter exit, or by a failed ``Accelerator()``, it enters no
        collective: it finishes this process's own background saves and never waits for
        another process, so a process that raises ends the job as under plain torchrun. A
        tracker whose ``finish`` raises does not stop the others or the teardowns; the first
        such error is raised once they have run, as Accelerate raises it.
        """
        self._shutdown.end(agreed=sys.exc_info()[1] is None)

    def __enter__(self) -> Accelerator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # An exit path: never a collective, even when the block ended normally (the
        # processes may leave their blocks at different moments).
        self._shutdown.end(agreed=False)

    def __repr__(self) -> str:
        names = ", ".join(self.state.handlers) or "none"
        return (
            f"Accelerator(rank {self.state.rank}/{self.state.world_size}, "
            f"device {self.state.device_type}, mixed_precision={self.state.mixed_precision!r}, "
            f"handlers: {names})"
        )
