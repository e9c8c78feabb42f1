"""Preparing: models, optimizers, data loaders and schedulers made ready for the run.

:class:`Preparation` is the ``Accelerator``'s collaborator for ``prepare`` and its friends: each
object goes through the wrapper extension points in composition order and is added to the
run's record of what was prepared (:class:`~accelkw_core.runtime.preparing.prepared.Prepared`);
``free_memory`` empties that record.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from accelkw_core.contract.points import (
    AFTER_STEP,
    AROUND_STEP,
    MODEL_WRAPPER,
    OPTIMIZER_WRAPPER,
    ExtensionPoint,
)
from accelkw_core.errors import AccelkwError
from accelkw_core.runtime.stepping.clipping import innermost_optimizer
from accelkw_core.runtime.stepping.forward import patch_forward

if TYPE_CHECKING:
    from accelkw_core.runtime.accumulation import GradientState
    from accelkw_core.runtime.data.loading import DataLoading
    from accelkw_core.runtime.preparing.prepared import Prepared
    from accelkw_core.runtime.run_state import RunState

__all__ = ["Preparation"]

W = TypeVar("W")


class Preparation:
    """Prepares objects for a run and records them in ``prepared``.

    ``gradient_state`` decides when prepared optimizers and schedulers really step; ``data``
    rebuilds data loaders.
    """

    def __init__(
        self,
        state: RunState,
        gradient_state: GradientState,
        prepared: Prepared,
        data: DataLoading,
    ) -> None:
        self.state = state
        self.gradient_state = gradient_state
        self.prepared = prepared
        self.data = data

    def prepare(self, *objects: Any) -> Any:
        """Prepare models, optimizers and data loaders; other objects pass through.

        One object for one argument, else a tuple in the order given.
        """
        # Schedulers last, as in Accelerate, so each finds its prepared optimizer.
        firsts = [obj if _is_scheduler(obj) else self._prepare_one(obj) for obj in objects]
        prepared = tuple(self.prepare_scheduler(o) if _is_scheduler(o) else o for o in firsts)
        return prepared[0] if len(prepared) == 1 else prepared

    def _prepare_one(self, obj: Any) -> Any:
        import torch

        from accelkw_core.runtime.data.data_loader import PreparedDataLoader
        from accelkw_core.runtime.preparing.optimizer import AcceleratedOptimizer

        if isinstance(obj, torch.nn.Module):
            return self.prepare_model(obj)
        if isinstance(obj, AcceleratedOptimizer | PreparedDataLoader):
            return obj
        if isinstance(obj, torch.optim.Optimizer):
            return self.prepare_optimizer(obj)
        if isinstance(obj, torch.utils.data.DataLoader):
            loader = self.data.prepare(obj)
            self.prepared.data_loaders.append(loader)
            return loader
        return obj

    def _wrap(self, point: ExtensionPoint[Callable[[W], W]], obj: W) -> W:
        for contribution in self.state.contributions(point):
            wrap: Callable[[W], W] = contribution.value
            try:
                obj = wrap(obj)
            except Exception as exc:
                raise AccelkwError(
                    f"prepare: the {point} of handler {contribution.handler!r} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return obj

    def prepare_model(self, model: Any) -> Any:
        """``model`` on the device, its forward under the forward contexts, then wrapped."""
        original = model.to(self.state.device)
        patch_forward(original, self.state)
        wrapped = self._wrap(MODEL_WRAPPER, original)
        self.prepared.models.append((wrapped, original))
        return wrapped

    def prepare_optimizer(self, optimizer: Any) -> Any:
        """``optimizer`` through every optimizer wrapper, stepping through the step chain."""
        from accelkw_core.runtime.preparing.optimizer import AcceleratedOptimizer
        from accelkw_core.runtime.stepping.training_step import build_step

        inner = self._wrap(OPTIMIZER_WRAPPER, optimizer)
        around = self.state.values(AROUND_STEP)
        after = self.state.values(AFTER_STEP)
        chain = build_step(around, after) if around or after else None
        prepared = AcceleratedOptimizer(inner, chain, self.gradient_state, self.state)
        self.prepared.optimizers.append(prepared)
        return prepared

    def prepare_scheduler(self, scheduler: Any) -> Any:
        """``scheduler`` stepping only when its optimizer really stepped (Accelerate's rules)."""
        from accelkw_core.runtime.preparing.scheduler import AcceleratedScheduler

        schedulers = self.prepared.schedulers
        if isinstance(scheduler, AcceleratedScheduler):
            if scheduler not in schedulers:
                schedulers.append(scheduler)
            return scheduler
        optimizers = self.prepared.optimizers
        target = getattr(scheduler, "optimizer", None)
        for opt in optimizers:
            if target is opt or target is innermost_optimizer(opt):
                optimizers = [opt]
                break
        gradient_state = self.gradient_state
        prepared = AcceleratedScheduler(
            scheduler,
            optimizers,
            num_processes=self.state.world_size,
            synced=lambda: bool(gradient_state.sync_gradients),
            on_unsynced=gradient_state.adjust_scheduler,
        )
        schedulers.append(prepared)
        return prepared

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object, reset the step, collect garbage, empty the CUDA cache.

        Returns one ``None`` per object, so the caller's names can drop them.
        """
        import torch

        released: list[Any] = [None] * len(objects)
        self.prepared.clear()
        self.gradient_state.step = 0
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return released


def _is_scheduler(obj: Any) -> bool:
    import torch

    from accelkw_core.runtime.preparing.scheduler import AcceleratedScheduler

    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler | AcceleratedScheduler)
