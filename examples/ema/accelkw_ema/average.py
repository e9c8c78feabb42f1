"""``ExponentialMovingAverage``: the averages of the prepared models' parameters.

Imported when ``EmaKwargs`` plans, never when the plugin is listed: this module imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from accelkw_core.plugin import StepContext

__all__ = ["ExponentialMovingAverage"]

# torch.compile's wrapper keeps the module it compiled here; DDP and DataParallel in .module.
_WRAPPERS = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)


def _unwrap(model: Any) -> Any:
    while True:
        if isinstance(model, _WRAPPERS):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


class _Tracked:
    """One prepared model: its floating-point parameters, their averages, its step count."""

    __slots__ = ("averages", "module", "names", "params", "steps")

    def __init__(self, module: Any) -> None:
        named = [(n, p) for n, p in module.named_parameters() if p.is_floating_point()]
        self.module = module
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.averages = [p.detach().clone() for p in self.params]
        self.steps = 0


class ExponentialMovingAverage:
    """An exponential moving average of the weights of every model the run prepares.

    It is ``ema_of(accelerator)``, and the run's ``model_wrapper`` (:meth:`track`), ``after_step``
    (:meth:`after_step`) and ``checkpoint`` contributions.

    - Each prepared model is tracked from the weights it has once wrapped. Its floating-point
      parameters have an average each, of their own dtype and device; buffers (batch-norm
      statistics) are not averaged: evaluating with the averages uses the model's own.
    - After an optimizer step that was not skipped, the averages of the parameters that
      optimizer trains are updated (a frozen parameter, in no optimizer, keeps its start
      value, which is its value). Steps are counted per model: ``update_after_step`` steps
      copy the weights, then every ``update_every``-th step averages with ``decay``.
    - :meth:`average_parameters` swaps the averages into the models for a block;
      :meth:`copy_to` writes them for good (before saving the final model).
    - :meth:`state_dict`/:meth:`load_state_dict` save and restore the averages and step
      counts, the models in the order they were prepared; after loading a checkpoint saved
      without them, :meth:`checkpoint_loaded_without_state` starts them from the loaded weights.
    """

    def __init__(self, decay: float, update_after_step: int = 0, update_every: int = 1) -> None:
        self.decay = decay
        self.update_after_step = update_after_step
        self.update_every = update_every
        self._tracked: list[_Tracked] = []

    # -- contributions -------------------------------------------------------------------------

    def track(self, model: Any) -> Any:
        """Start averaging ``model`` (the ``model_wrapper`` contribution); return it unchanged."""
        module = _unwrap(model)
        if not any(t.module is module for t in self._tracked):
            self._tracked.append(_Tracked(module))
        return model

    def after_step(self, step: StepContext) -> None:
        """Update the averages of the parameters ``step.optimizer`` trains, unless it skipped."""
        if step.skipped:
            return
        trained = {id(p) for group in step.optimizer.param_groups for p in group["params"]}
        for tracked in self._tracked:
            pairs = [
                (average, param)
                for average, param in zip(tracked.averages, tracked.params, strict=True)
                if id(param) in trained
            ]
            if pairs:
                tracked.steps += 1
                self._update(pairs, tracked.steps)

    def _update(self, pairs: list[tuple[Any, Any]], steps: int) -> None:
        after = steps - self.update_after_step
        with torch.no_grad():
            if after <= 0:
                for average, param in pairs:
                    average.copy_(param)
            elif after % self.update_every == 0:
                weight = 1.0 - self.decay
                for average, param in pairs:
                    average.lerp_(param, weight)

    # -- evaluation and export -----------------------------------------------------------------

    @property
    def models(self) -> list[Any]:
        """The tracked models (unwrapped), in the order they were prepared."""
        return [t.module for t in self._tracked]

    def averages(self, index: int = 0) -> dict[str, Any]:
        """The averages of the ``index``-th prepared model by parameter name (live tensors)."""
        tracked = self._tracked[index]
        return dict(zip(tracked.names, tracked.averages, strict=True))

    @contextlib.contextmanager
    def average_parameters(self) -> Iterator[None]:
        """Evaluate with the averages: swap them into every tracked model, and back on exit.

        Do not step an optimizer inside the block: the weights it trains come back on exit.
        """
        with torch.no_grad():
            saved = [[p.detach().clone() for p in t.params] for t in self._tracked]
            self.copy_to()
        try:
            yield
        finally:
            with torch.no_grad():
                for tracked, values in zip(self._tracked, saved, strict=True):
                    for param, value in zip(tracked.params, values, strict=True):
                        param.copy_(value)

    def copy_to(self) -> None:
        """Write the averages into the tracked models' parameters, for good."""
        with torch.no_grad():
            for tracked in self._tracked:
                for param, average in zip(tracked.params, tracked.averages, strict=True):
                    param.copy_(average)

    # -- checkpoint ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The step counts and averages of every tracked model, in preparation order."""
        return {
            "models": [
                {"steps": t.steps, "averages": dict(zip(t.names, t.averages, strict=True))}
                for t in self._tracked
            ]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; the same models must be prepared first."""
        models = state["models"]
        if len(models) != len(self._tracked):
            raise ValueError(
                f"EMA state holds averages of {len(models)} model(s) but this run prepared "
                f"{len(self._tracked)}: prepare the same models, in the same order, before "
                "loading"
            )
        for i, (tracked, saved) in enumerate(zip(self._tracked, models, strict=True)):
            names = set(saved["averages"])
            if names != set(tracked.names):
                missing = sorted(set(tracked.names) - names)
                unexpected = sorted(names - set(tracked.names))
                raise ValueError(
                    f"EMA state of model {i} does not match its parameters: missing "
                    f"{missing}, unexpected {unexpected}"
                )
        with torch.no_grad():
            for tracked, saved in zip(self._tracked, models, strict=True):
                for average, name in zip(tracked.averages, tracked.names, strict=True):
                    average.copy_(saved["averages"][name])
                tracked.steps = int(saved["steps"])

    def checkpoint_loaded_without_state(self) -> None:
        """A checkpoint saved without this average was loaded (the handler was added since):
        start the averages from the weights it loaded, not from those the run began with."""
        with torch.no_grad():
            for tracked in self._tracked:
                for average, param in zip(tracked.averages, tracked.params, strict=True):
                    average.copy_(param)
                tracked.steps = 0

    def __repr__(self) -> str:
        return (
            f"ExponentialMovingAverage(decay={self.decay!r}, models={len(self._tracked)}, "
            f"steps={[t.steps for t in self._tracked]})"
        )
