"""Keeping optimizers on the parameters a float8 conversion put in the model.

With ``enable_fsdp_float8_all_gather`` (Accelerate's default), torchao gives each converted
layer a new weight ``Parameter`` that wraps the old one. An optimizer built before ``prepare``
(the usual order) still holds the old parameter, which gets no gradient: those layers would
never train (Accelerate 1.15 leaves it so). The conversion records each replacement here, and
every prepared optimizer, whichever of the two ``prepare`` meets first, is pointed at the new
parameters.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["ParameterSwaps"]


class ParameterSwaps:
    """The replaced parameters of one run (old -> new) and the optimizers to keep on them."""

    def __init__(self) -> None:
        # Keyed by id, with the old parameter kept alive so its id is never reused meanwhile.
        self._swaps: dict[int, tuple[Any, Any]] = {}
        self._optimizers: list[weakref.ref[Any]] = []

    def weights_of(self, model: Any) -> dict[str, Any]:
        """Each ``nn.Linear``'s weight by qualified name, before a conversion."""
        import torch

        return {
            name: module.weight
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)
        }

    def record(self, before: dict[str, Any], model: Any) -> int:
        """Record the weights the conversion replaced; re-point the optimizers seen so far."""
        modules = dict(model.named_modules())
        count = 0
        for name, old in before.items():
            new = getattr(modules.get(name), "weight", None)
            if new is not None and new is not old:
                self._swaps[id(old)] = (old, new)
                count += 1
        for ref in self._optimizers:
            optimizer = ref()
            if optimizer is not None:
                self.repoint(optimizer)
        return count

    def repoint(self, optimizer: Any) -> Any:
        """``optimizer`` with every replaced parameter (and its state) swapped for the new one;
        remembered, so a model converted later re-points it too."""
        if not any(ref() is optimizer for ref in self._optimizers):
            self._optimizers.append(weakref.ref(optimizer))
        for group in optimizer.param_groups:
            params = group["params"]
            for i, param in enumerate(params):
                swap = self._swaps.get(id(param))
                if swap is None or swap[0] is not param:
                    continue
                new = swap[1]
                params[i] = new
                if param in optimizer.state:
                    optimizer.state[new] = optimizer.state.pop(param)
        return optimizer
