"""The rest of Accelerate's ``Accelerator`` surface that training scripts use, as a mixin.

Clipping, metrics gathering, process helpers, schedulers, checkpoints and memory, each with
Accelerate 1.15's signature and semantics. The ``Accelerator`` inherits it; what it needs of
the ``Accelerator`` is ``state``, ``_models`` and ``unwrap_model``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkw_core.runtime import clipping
from accelkw_core.runtime import collectives as ops
from accelkw_core.runtime.checkpoints.layout import Checkpointed
from accelkw_core.runtime.checkpoints.save import model_state_dict
from accelkw_core.runtime.processes import (
    DistributedType,
    distributed_type,
    goes_first,
    on_process,
    split_inputs,
)

if TYPE_CHECKING:
    from accelkw_core.runtime.dataloader_config import DataLoaderConfiguration
    from accelkw_core.runtime.state import AcceleratorState

__all__ = ["AccelerateSurface"]


class AccelerateSurface:
    """Accelerate's ``Accelerator`` methods beyond preparing, backward and stepping."""

    state: AcceleratorState
    dataloader_config: DataLoaderConfiguration
    _models: list[tuple[Any, Any]]

    if TYPE_CHECKING:

        def unwrap_model(
            self, model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
        ) -> Any: ...

    # -- what was prepared ---------------------------------------------------------------------

    def _prepared(self, kind: str) -> list[Any]:
        # Created on first use, so the Accelerator's __init__ needs no line for each list.
        found: list[Any] = self.__dict__.setdefault(f"_prepared_{kind}", [])
        return found

    def _track(self, kind: str, obj: Any) -> Any:
        self._prepared(kind).append(obj)
        return obj

    # -- facts ---------------------------------------------------------------------------------

    @property
    def distributed_type(self) -> DistributedType:
        """``NO``, ``MULTI_CPU``, ``MULTI_GPU``, ... (Accelerate's ``DistributedType``)."""
        return distributed_type(self.state)

    @property
    def use_distributed(self) -> bool:
        """Whether this run has several processes (Accelerate's ``use_distributed``)."""
        return self.state.distributed and self.distributed_type != DistributedType.NO

    # -- data loaders (Accelerate reads these from ``dataloader_config``) ------------------------

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self.dataloader_config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        import dataclasses

        dataclasses.replace(self.dataloader_config, even_batches=value)  # checks the value
        self.dataloader_config.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self.dataloader_config.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        return self.dataloader_config.use_stateful_dataloader

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """``dataloader`` without its first ``num_batches`` batches (to resume mid-epoch)."""
        from accelkw_core.runtime.data_loader import skip_first_batches

        return skip_first_batches(dataloader, num_batches=num_batches)

    # -- triggers ------------------------------------------------------------------------------

    def set_trigger(self) -> None:
        """Raise this process's trigger; :meth:`check_trigger` then sees it on every process."""
        import torch

        self.__dict__["_flag_tensor"] = torch.tensor(1, device=self.state.device)

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last check that saw one.

        Every process must call it (it sums the triggers across processes); when one was set,
        every process gets ``True`` and the triggers are lowered.
        """
        import torch

        flag = self.__dict__.get("_flag_tensor")
        if flag is None:
            flag = torch.tensor(0, device=self.state.device)
        if ops.reduce(flag, "sum", self.state).item() >= 1:
            self.__dict__["_flag_tensor"] = torch.tensor(0, device=self.state.device)
            return True
        self.__dict__["_flag_tensor"] = flag
        return False

    # -- processes -----------------------------------------------------------------------------

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first; the others enter once it has left."""
        with goes_first(self.state, self.state.rank == 0):
            yield

    @contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """The local main process of each machine runs the block first, then the others."""
        with goes_first(self.state, self.state.local_rank == 0):
            yield

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Decorate ``function`` to run on the main process only (``None`` elsewhere)."""
        return on_process(function, lambda: self.state.rank == 0, "on_main_process")

    def on_local_main_process(
        self, function: Callable[..., Any] | None = None
    ) -> Callable[..., Any]:
        """Decorate ``function`` to run on each machine's local main process only."""
        return on_process(function, lambda: self.state.local_rank == 0, "on_local_main_process")

    @contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This process's contiguous share of ``inputs`` (list, tuple, tensor or dict of them).

        With ``apply_padding`` every share has the same length (the last element repeated).
        """
        yield split_inputs(inputs, self.state, apply_padding)

    # -- gradients -----------------------------------------------------------------------------

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide the gradients of ``optimizer`` (default: every prepared one) by the loss scale.

        Through the ``unscale_gradients`` contribution; nothing happens when no handler scales
        losses.
        """
        if optimizer is None:
            optimizers = self._prepared("optimizers")
        elif isinstance(optimizer, list | tuple):
            optimizers = list(optimizer)
        else:
            optimizers = [optimizer]
        clipping.unscale(self.state, optimizers)

    def clip_grad_norm_(
        self, parameters: Iterable[Any], max_norm: float, norm_type: float = 2
    ) -> Any:
        """``torch.nn.utils.clip_grad_norm_`` after unscaling; returns the total norm."""
        self.unscale_gradients()
        return clipping.clip_norm(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Iterable[Any], clip_value: float) -> None:
        """``torch.nn.utils.clip_grad_value_`` after unscaling."""
        import torch

        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # -- metrics -------------------------------------------------------------------------------

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather ``input_data`` from every process, without the samples repeated at the end.

        On the last batch of a prepared data loader, the samples added to complete the last
        round are dropped, so each sample counts once. Anything that is not a tensor (or a
        nested list/tuple/dict of tensors), or ``use_gather_object=True``, is gathered as
        Python objects into one list.
        """
        as_objects = use_gather_object or not _all_tensors(input_data)
        data = (
            ops.gather_objects(input_data, self.state)
            if as_objects
            else ops.gather(input_data, self.state)
        )
        progress = getattr(getattr(self, "gradient_state", None), "loaders", None)
        if progress is None or not progress.end_of_dataloader:
            return data
        remainder = progress.remainder
        if remainder <= 0:
            return data
        if as_objects:
            return data[:remainder]
        return _map_tensors(lambda t: t[:remainder], data)

    # -- schedulers ----------------------------------------------------------------------------

    def prepare_scheduler(self, scheduler: Any) -> Any:
        """``scheduler`` stepping only when its optimizer really stepped (Accelerate's rules)."""
        from accelkw_core.runtime.scheduler import AcceleratedScheduler

        if isinstance(scheduler, AcceleratedScheduler):
            if scheduler not in self._prepared("schedulers"):
                self._track("schedulers", scheduler)
            return scheduler
        optimizers = self._prepared("optimizers")
        target = getattr(scheduler, "optimizer", None)
        for opt in optimizers:
            if target is opt or target is clipping.innermost_optimizer(opt):
                optimizers = [opt]
                break
        gradient_state = getattr(self, "gradient_state", None)
        prepared = AcceleratedScheduler(
            scheduler,
            optimizers,
            num_processes=self.state.world_size,
            synced=(lambda: bool(gradient_state.sync_gradients)) if gradient_state else _true,
            on_unsynced=getattr(gradient_state, "adjust_scheduler", None),
        )
        return self._track("schedulers", prepared)

    # -- checkpoints ---------------------------------------------------------------------------

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` (each with ``state_dict``/``load_state_dict``) with the run."""
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
        self._prepared("custom").extend(objects)

    def get_state_dict(self, model: Any, unwrap: bool = True) -> dict[str, Any]:
        """``model``'s weights: through the ``model_state`` contribution, else its state_dict.

        ``unwrap=True`` reads the model without the handlers' wrappers (no ``module.`` prefix).
        """
        return model_state_dict(self.state, model, self.unwrap_model(model) if unwrap else model)

    def _checkpointed(self) -> Checkpointed:
        return Checkpointed(
            [wrapped for wrapped, _ in self._models],
            self._prepared("optimizers"),
            self._prepared("schedulers"),
            self._prepared("data_loaders"),
            self._prepared("custom"),
            int(getattr(self, "step", 0) or 0),
            unwrapped=[self.unwrap_model(wrapped) for wrapped, _ in self._models],
        )

    # -- memory --------------------------------------------------------------------------------

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object, collect garbage, empty the CUDA cache; returns ``None``s.

        Call it between two trainings with different models; ``objects`` come back as ``None``
        so ``model, optimizer = accelerator.free_memory(model, optimizer)`` drops them.
        """
        import torch

        released: list[Any] = [None] * len(objects)
        self._models.clear()
        for kind in ("optimizers", "schedulers", "data_loaders", "custom"):
            self._prepared(kind).clear()
        if hasattr(type(self), "step"):
            with contextlib.suppress(AttributeError):
                self.step = 0
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return released

    def clear(self, *objects: Any) -> list[Any]:
        """Alias of :meth:`free_memory`."""
        return self.free_memory(*objects)


def _true() -> bool:
    return True


def _all_tensors(data: Any) -> bool:
    import torch

    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, dict):
        return all(_all_tensors(v) for v in data.values())
    if isinstance(data, list | tuple):
        return all(_all_tensors(v) for v in data)
    return False


def _map_tensors(fn: Callable[[Any], Any], data: Any) -> Any:
    if isinstance(data, dict):
        return type(data)({k: _map_tensors(fn, v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_map_tensors(fn, v) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(_map_tensors(fn, v) for v in data)
    return fn(data)
