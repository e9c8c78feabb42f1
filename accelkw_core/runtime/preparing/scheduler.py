"""``AcceleratedScheduler``: a learning-rate scheduler that steps only on real optimizer steps.

Imported by ``Accelerator.prepare`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

__all__ = ["AcceleratedScheduler"]


def _always() -> bool:
    return True


class AcceleratedScheduler:
    """Wraps an LR scheduler as Accelerate's ``AcceleratedScheduler`` does.

    ``step()`` does nothing when the step of any of ``optimizers`` was skipped (inf/NaN
    gradients under loss scaling) or when ``synced()`` is false (a gradient-accumulation
    micro-step: the hook a gradient-accumulation plugin answers through
    ``Accelerator.sync_gradients``; ``on_unsynced`` runs then, for its scheduler adjustment).
    Otherwise it steps the scheduler ``num_processes`` times, since each optimizer step consumed
    ``num_processes`` batches (once with ``split_batches``); a scheduler with ``total_steps``
    (``OneCycleLR``) is not stepped past them. With ``step_with_optimizer=False`` every call
    steps it once. Everything else is the wrapped scheduler's.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Sequence[Any],
        *,
        num_processes: int = 1,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
        synced: Callable[[], bool] = _always,
        on_unsynced: Callable[[Any], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = list(optimizers)
        self.num_processes = num_processes
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches
        self.synced = synced
        self.on_unsynced = on_unsynced

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance the scheduler for a real optimizer step (see the class docstring)."""
        scheduler = self.scheduler
        if not self.step_with_optimizer:
            scheduler.step(*args, **kwargs)
            return
        if not self.synced():
            if self.on_unsynced is not None:
                self.on_unsynced(scheduler)
            return
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        for _ in range(1 if self.split_batches else self.num_processes):
            total = getattr(scheduler, "total_steps", None)
            if total is not None and scheduler._step_count > total:
                continue
            scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> Any:
        return self.scheduler.get_last_lr()

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        return self.scheduler.print_lr(*args, **kwargs)

    if not TYPE_CHECKING:
        # The wrapped scheduler's other attributes (last_epoch, base_lrs, ...) at run time;
        # hidden from type checkers, so a misspelt attribute is an error there, not an Any.
        def __getattr__(self, name: str) -> Any:
            if name == "scheduler":
                raise AttributeError(name)
            return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
