"""Gradient accumulation in the runtime: which micro-steps sync gradients and step the optimizer.

The runtime keeps the facts (``sync_gradients``, the micro-step counter, the data loaders being
iterated) and asks the policy contributed to the ``accumulation`` extension point what a new
micro-step does. Without a contribution, every micro-step syncs and steps (:class:`AlwaysSync`),
which is Accelerate with ``gradient_accumulation_steps=1``. The policy of a plugin decides the
rest (how many micro-steps, the end of a data loader, schedulers); the runtime knows none by name.

Nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from accelkw_core.contract.contributions import AccumulationPolicy
from accelkw_core.contract.points import ACCUMULATION
from accelkw_core.discovery.catalog import provider_hint
from accelkw_core.errors import ConfigError

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = [
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
    def from_state(cls, state: RunState, loaders: Any = None) -> GradientState:
        """The gradient state of a run: its ``accumulation`` contribution, if any."""
        contributed = state.values(ACCUMULATION)
        return cls(contributed[0] if contributed else None, loaders)

    @property
    def num_steps(self) -> int:
        """Micro-steps per optimizer step."""
        return int(self.policy.num_steps)

    @num_steps.setter
    def num_steps(self, value: int) -> None:
        self.policy.num_steps = value

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
