"""What a contribution to each extension point is: the callable types and protocols of the points.

Each constant of :mod:`accelkw_core.contract.points` is an ``ExtensionPoint[T]`` whose ``T`` is one
of these types, so ``plan.contribute(MODEL_WRAPPER, value, ...)`` is checked by ``mypy``: a value
that is not a ``ModelWrapper`` is a type error in the plugin, not a failure in a user's run.

Nothing here imports torch at run time; the torch types are for the type checker only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from accelkw_core.contract.step import AfterStep, AroundStep

if TYPE_CHECKING:
    import torch

    from accelkw_core.contract.checkpoint_io import CheckpointReader, CheckpointWriter, SaveJob

__all__ = [
    "AccumulationPolicy",
    "AfterStep",
    "ApplyLoaded",
    "AroundBackward",
    "AroundStep",
    "Backward",
    "CheckpointContribution",
    "CheckpointExecutor",
    "CheckpointOwner",
    "ForwardContext",
    "LossTransform",
    "ModelCheckpoint",
    "ModelState",
    "ModelWrapper",
    "OptimizerWrapper",
    "OutputConverter",
    "ProfilerFactory",
    "StartsFresh",
    "Stateful",
    "SuspendSync",
    "Teardown",
    "Unscale",
]

#: ``forward_context``: called with no argument, returns the context entered around a forward.
ForwardContext = Callable[[], AbstractContextManager[Any]]

#: ``forward_output``: ``convert(outputs) -> outputs``, applied to what a forward returns.
OutputConverter = Callable[[Any], Any]

#: ``model_wrapper``: ``wrap(model) -> model`` (DDP, ``fully_shard``, ``torch.compile``).
ModelWrapper = Callable[["torch.nn.Module"], "torch.nn.Module"]

#: ``optimizer_wrapper``: ``wrap(optimizer) -> optimizer``.
OptimizerWrapper = Callable[["torch.optim.Optimizer"], "torch.optim.Optimizer"]

#: ``loss``: ``transform(loss) -> loss``, applied in ``Accelerator.backward`` before backward.
LossTransform = Callable[["torch.Tensor"], "torch.Tensor"]

#: ``around_backward``: ``around(loss, proceed)``, wrapped around the backward of
#: ``Accelerator.backward``: ``proceed(loss)`` runs the inner contributions and the backward
#: itself with the loss it is given (a loss scaler passes the scaled loss); not calling it skips
#: the backward.
AroundBackward = Callable[["torch.Tensor", Callable[["torch.Tensor"], None]], None]

#: ``unscale_gradients``: ``unscale(optimizer)``, divides its gradients by the loss scale.
Unscale = Callable[["torch.optim.Optimizer"], None]

#: ``no_sync``: ``suspend(model)`` returns the context that holds back gradient sync.
SuspendSync = Callable[["torch.nn.Module"], AbstractContextManager[Any]]

#: ``profiler``: called with no argument, returns the context ``accelerator.profile()`` enters.
ProfilerFactory = Callable[[], AbstractContextManager[Any]]

#: ``teardown``: called once with no argument when the run ends.
Teardown = Callable[[], None]

#: What ``read_checkpoint`` returns: the step that applies what was read (and checked).
ApplyLoaded = Callable[[], None]


class Backward(Protocol):
    """``backward`` (deprecated, use ``AroundBackward``): runs the backward pass of ``loss`` in
    place of ``loss.backward(**kwargs)``, inside the ``around_backward`` chain."""

    def __call__(self, loss: torch.Tensor, **kwargs: Any) -> None: ...


class AccumulationPolicy(Protocol):
    """``accumulation``: which micro-steps of gradient accumulation sync and step.

    ``num_steps``: micro-steps per optimizer step; ``accelerator.backward`` divides the loss by
    it and ``accelerator.gradient_accumulation_steps`` reads (and sets) it.
    ``adjust_scheduler``: whether a prepared scheduler's step count advances on micro-steps
    that do not step the optimizer. ``sync_each_batch``: whether a distributed model
    synchronises gradients on every micro-step anyway (less memory, more communication).
    ``advance(step, end_of_dataloader)`` is called once per ``accelerator.accumulate()``
    with the micro-step counter and whether the innermost prepared data loader is on its
    last batch; it returns the new counter and whether this micro-step syncs and steps.
    """

    num_steps: int
    adjust_scheduler: bool
    sync_each_batch: bool

    def advance(self, step: int, end_of_dataloader: bool) -> tuple[int, bool]: ...


class ModelState(Protocol):
    """``model_state``: how a prepared model's weights are read and written (a sharded model
    gathers them)."""

    def state_dict(self, model: torch.nn.Module, /) -> dict[str, Any]: ...

    def load_state_dict(self, model: torch.nn.Module, state: dict[str, Any], /) -> None: ...


class ModelCheckpoint(Protocol):
    """``model_checkpoint``: owns how ``save_state``/``load_state`` write and read the prepared
    models' and optimizers' state, on every process.

    ``read_checkpoint`` reads and checks everything, changes nothing, and returns the step
    that applies it, so a damaged checkpoint leaves every object as it was.
    """

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        models: Sequence[torch.nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        /,
    ) -> None: ...

    def read_checkpoint(
        self,
        reader: CheckpointReader,
        models: Sequence[torch.nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        /,
    ) -> ApplyLoaded: ...


@runtime_checkable
class Stateful(Protocol):
    """A ``checkpoint`` contribution the runtime saves for it: the main process writes
    ``state_dict()`` to ``<key>.pt``, and ``load_state_dict`` gets it back."""

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> None: ...


@runtime_checkable
class CheckpointOwner(Protocol):
    """A ``checkpoint`` contribution that owns its files: ``save_checkpoint(writer)`` runs on
    every process; ``read_checkpoint(reader)`` reads and checks, and returns the step that
    applies it, or ``None`` when the checkpoint holds nothing of it (it starts fresh)."""

    def save_checkpoint(self, writer: CheckpointWriter, /) -> None: ...

    def read_checkpoint(self, reader: CheckpointReader, /) -> ApplyLoaded | None: ...


@runtime_checkable
class StartsFresh(Protocol):
    """A ``checkpoint`` contribution that wants to know when a checkpoint without its state
    was loaded (it was added since the save): ``checkpoint_loaded_without_state()`` is called
    once the rest of the checkpoint is applied, after the ``CheckpointWarning`` that says so.

    An exponential moving average, for one, starts its averages from the loaded weights
    there, not from the weights the run began with.
    """

    def checkpoint_loaded_without_state(self) -> None: ...


#: ``checkpoint``: either kind; an object with ``save_checkpoint`` is treated as an owner.
CheckpointContribution = Stateful | CheckpointOwner


class CheckpointExecutor(Protocol):
    """``checkpoint_executor``: where and when a save's files are written and committed.

    ``submit(job)`` is called by ``save_state`` on every process, in order; it must call
    ``job.stage()`` before returning (on the caller's thread: the state is copied then), and
    ``job.commit(group)`` once, where it likes (a thread of its own; ``group`` a process group
    of its own for a run of several processes). ``wait()`` returns once every submitted save
    is committed, and raises a failed one's error once; ``load_state``, ``wait_for_everyone``,
    ``end_training`` and ``accelerator.wait_for_checkpoints()`` call it, and the processes
    agree on its outcome before any raises. ``submit`` raising an earlier save's failure must
    do so at the same call on every process: decide by the saves submitted (which it waits
    for), never by which happen to be done already, or one process raises while another
    stages the next save and waits for it in a collective.
    """

    def submit(self, job: SaveJob, /) -> None: ...

    def wait(self) -> None: ...
