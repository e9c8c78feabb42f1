"""``AcceleratedOptimizer``: an optimizer whose steps go through the gradient scaler, if any.

Imported by ``Accelerator.prepare`` only, so importing torch here costs nothing at package import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["AcceleratedOptimizer"]


class AcceleratedOptimizer(torch.optim.Optimizer):  # type: ignore[misc]
    """Wraps an optimizer so ``step()`` runs ``scaler.step(opt); scaler.update()`` with a scaler.

    Everything else (``zero_grad``, ``param_groups``, ``state_dict``, …) is the wrapped
    optimizer's. It subclasses ``torch.optim.Optimizer`` so learning-rate schedulers accept it.
    ``step_was_skipped`` is ``True`` after a step the scaler skipped for inf/NaN gradients.
    """

    def __init__(self, optimizer: Any, scaler: Any = None) -> None:
        # No super().__init__: the wrapped optimizer owns the parameters and the state.
        self.optimizer = optimizer
        self.scaler = scaler
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

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step the wrapped optimizer, through the scaler when there is one."""
        scaler = self.scaler
        if scaler is None:
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        scale_before = scaler.get_scale()
        result = scaler.step(self.optimizer, closure) if closure else scaler.step(self.optimizer)
        scaler.update()
        # The scaler lowers its scale exactly when it skipped the step for inf/NaN gradients.
        self._skipped = scaler.get_scale() < scale_before
        return result

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step()`` was skipped because gradients held inf or NaN."""
        return self._skipped

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r}, scaler={self.scaler!r})"
