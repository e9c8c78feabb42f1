"""``AcceleratedOptimizer``: an optimizer whose steps go through the run's step chain.

Imported by ``Accelerator.prepare`` only, so importing torch here costs nothing at package import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from accelkw_core.contract.step import StepContext

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = ["AcceleratedOptimizer"]


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer so ``step()`` runs the ``around_step`` and ``after_step`` chain.

    Everything else (``zero_grad``, ``param_groups``, ``state_dict``, …) is the wrapped
    optimizer's. It subclasses ``torch.optim.Optimizer`` so learning-rate schedulers accept it.
    ``step_was_skipped`` is ``True`` after a step an around-step contribution skipped (the
    gradient scaler, for inf/NaN gradients). While ``gradient_state.sync_gradients`` is
    ``False`` (a micro-step of gradient accumulation), ``step()`` and ``zero_grad()`` do
    nothing, as in Accelerate.
    """

    def __init__(
        self,
        optimizer: Any,
        chain: Callable[[StepContext], Any] | None = None,
        gradient_state: Any = None,
        run: RunState | None = None,
    ) -> None:
        # No super().__init__: the wrapped optimizer owns the parameters and the state.
        self.optimizer = optimizer
        self._chain = chain
        self.gradient_state = gradient_state
        self._run = run
        self._steps = 0  # step() calls that ran the chain: StepContext.index
        self._taken = 0  # of those, the ones not skipped: StepContext.taken
        self._skipped = False

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> Any:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: Any) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> Any:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: Any) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.optimizer.state_dict())

    def train(self) -> None:
        """Put the wrapped optimizer in training mode, when it has one (schedule-free optimizers).

        An optimizer wrapper contributed by a handler is looked through: the first optimizer
        down the ``.optimizer`` chain with a ``train()`` method gets the call.
        """
        _call_mode(self.optimizer, "train")

    def eval(self) -> None:
        """Put the wrapped optimizer in evaluation mode, when it has one (schedule-free optimizers)."""
        _call_mode(self.optimizer, "eval")

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.gradient_state is not None and not self.gradient_state.sync_gradients:
            return
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step the wrapped optimizer through the step chain (directly when it is empty)."""
        if self.gradient_state is not None and not self.gradient_state.sync_gradients:
            return None
        chain = self._chain
        if chain is None:
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        step = StepContext(self.optimizer, closure, self._steps, self._run, taken=self._taken)
        self._steps += 1
        result = chain(step)
        self._skipped = step.skipped
        self._taken += 0 if step.skipped else 1
        return result

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step()`` was skipped (inf/NaN gradients under loss scaling)."""
        return self._skipped

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(
            {"_taken": state.get("_steps", 0), **state}
        )  # pickled before taken was counted

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


def _call_mode(optimizer: Any, mode: str) -> None:
    while optimizer is not None:
        method = getattr(optimizer, mode, None)
        if callable(method):
            method()
            return
        optimizer = getattr(optimizer, "optimizer", None)
