"""Gradient accumulation in the runtime: which micro-steps sync gradients and step the optimizer.

The runtime keeps the facts (``sync_gradients``, the micro-step counter, the data loaders being
iterated) and asks the policy contributed to the ``accumulation`` extension point what a new
micro-step does. Without a contribution, every micro-step syncs and steps (:class:`AlwaysSync`),
which is Accelerate with ``gradient_accumulation_steps=1``. The policy of a plugin decides the
rest (how many micro-steps, the end of a data loader, schedulers); the runtime knows none by name.

Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from accelkw_core.contract.contributions import AccumulationPolicy
from accelkw_core.contract.points import ACCUMULATION, NO_SYNC
from accelkw_core.discovery.catalog import provider_hint
from accelkw_core.errors import ConfigError

if TYPE_CHECKING:
    from accelkw_core.runtime.state import AcceleratorState

__all__ = [
    "AccumulationAPI",
    "AccumulationPolicy",
    "AlwaysSync",
    "GradientState",
    "LoaderEnd",
]


class AlwaysSync:
    """The default policy: every micro-step syncs gradients and steps the optimizer.

    The counter counts micro-steps and starts again after a data loader's last batch, as
    Accelerate's ``accelerator.step`` does with one accumulation step.
    """

    adjust_scheduler = False
    sync_each_batch = False

    @property
    def num_steps(self) -> int:
        return 1

    @num_steps.setter
    def num_steps(self, value: int) -> None:
        if value != 1:
            raise ConfigError(
                "accelerator",
                "gradient_accumulation_steps",
                value,
                f"1, as no installed handler accumulates gradients: {provider_hint('accumulation')}",
            )

    def advance(self, step: int, end_of_dataloader: bool) -> tuple[int, bool]:
        return (0 if end_of_dataloader else step + 1), True

    def __repr__(self) -> str:
        return "AlwaysSync()"


class LoaderEnd(Protocol):
    """What the runtime reads of the prepared data loaders being iterated."""

    @property
    def end_of_dataloader(self) -> bool: ...


class GradientState:
    """Whether this micro-step syncs gradients and steps the optimizer (Accelerate's name).

    ``sync_gradients`` is set by every ``accelerator.accumulate()`` (and may be set by hand, as
    in Accelerate); a prepared optimizer's ``step()`` and ``zero_grad()`` do nothing while it is
    ``False``. ``step`` is the micro-step counter; ``policy`` what the ``accumulation`` point
    holds (or :class:`AlwaysSync`); ``loaders`` what says whether the innermost prepared data
    loader is on its last batch (``None``: never).
    """

    __slots__ = ("loaders", "policy", "step", "sync_gradients")

    def __init__(self, policy: AccumulationPolicy | None = None, loaders: Any = None) -> None:
        self.policy: AccumulationPolicy = policy if policy is not None else AlwaysSync()
        # A LoaderEnd; typed Any so the runtime can hand it to the data loaders it prepares.
        self.loaders: Any = loaders
        self.step = 0
        self.sync_gradients = True

    @classmethod
    def from_state(cls, state: AcceleratorState, loaders: Any = None) -> GradientState:
        """The gradient state of a run: its ``accumulation`` contribution, if any."""
        contributed = state.values(ACCUMULATION)
        return cls(contributed[0] if contributed else None, loaders)

    @property
    def num_steps(self) -> int:
        """Micro-steps per optimizer step."""
        return int(self.policy.num_steps)

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the innermost prepared data loader being iterated is on its last batch."""
        return self.loaders is not None and bool(self.loaders.end_of_dataloader)

    def advance(self) -> bool:
        """Start a micro-step: ask the policy whether it syncs; returns ``sync_gradients``."""
        self.step, sync = self.policy.advance(self.step, self.end_of_dataloader)
        self.sync_gradients = bool(sync)
        return self.sync_gradients

    def holds_back(self, distributed: bool) -> bool:
        """Whether models hold back gradient communication on this micro-step."""
        if self.sync_gradients:
            return False
        return not (distributed and self.policy.sync_each_batch)

    def adjust_scheduler(self, scheduler: Any) -> None:
        """What a prepared LR scheduler does instead of stepping while gradients are not synced.

        It does not step (the optimizer did not); with the policy's ``adjust_scheduler`` its
        step count advances, as Accelerate's ``AcceleratedScheduler`` does.
        """
        if self.policy.adjust_scheduler:
            scheduler._step_count += 1

    def __repr__(self) -> str:
        return (
            f"GradientState(sync_gradients={self.sync_gradients}, step={self.step}, "
            f"num_steps={self.num_steps}, end_of_dataloader={self.end_of_dataloader}, "
            f"policy={self.policy!r})"
        )


class AccumulationAPI:
    """The ``Accelerator`` methods of gradient accumulation, with Accelerate's semantics."""

    state: AcceleratorState
    gradient_state: GradientState

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
        self.gradient_state.policy.num_steps = value

    @property
    def step(self) -> int:
        """The micro-step counter ``accumulate()`` advances (Accelerate's ``accelerator.step``)."""
        return self.gradient_state.step

    @step.setter
    def step(self, value: int) -> None:
        self.gradient_state.step = value

    @contextlib.contextmanager
    def no_sync(self, model: Any) -> Iterator[None]:
        """Hold back gradient synchronisation of ``model`` (a prepared model) in the block.

        Enters the ``no_sync`` contribution; without one, the model's own ``no_sync()`` when
        the run is distributed (DDP), else nothing, as Accelerate does.
        """
        with self._suspend(model):
            yield

    def _suspend(self, model: Any) -> AbstractContextManager[Any]:
        contributed = self.state.values(NO_SYNC)
        if contributed:
            manager: AbstractContextManager[Any] = contributed[0](model)
            return manager
        own = getattr(model, "no_sync", None) if self.state.distributed else None
        return own() if own is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def accumulate(self, *models: Any) -> Iterator[None]:
        """One micro-step of gradient accumulation.

        Sets :attr:`sync_gradients` from the accumulation policy (every
        ``gradient_accumulation_steps``-th micro-step, and the last batch of a prepared data
        loader, sync); on the others, ``models`` hold back gradient synchronisation and the
        prepared optimizers' ``step()`` and ``zero_grad()`` do nothing.
        """
        gradient_state = self.gradient_state
        gradient_state.advance()
        with contextlib.ExitStack() as stack:
            if gradient_state.holds_back(self.state.distributed):
                for model in models:
                    stack.enter_context(self._suspend(model))
            yield
