"""``Accelerator.prepare`` and friends: models, optimizers, data loaders and schedulers made
ready for the run, through the wrapper extension points in composition order."""

from __future__ import annotations

import warnings
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
from accelkw_core.runtime.forward import patch_forward, unpatch_forward

if TYPE_CHECKING:
    from accelkw_core.runtime.accumulation import GradientState
    from accelkw_core.runtime.dataloader_config import DataLoaderConfiguration
    from accelkw_core.runtime.state import AcceleratorState

__all__ = ["PreparingAPI"]

W = TypeVar("W")


class PreparingAPI:
    """The preparing half of the ``Accelerator`` (a mixin: it reads the run's state)."""

    state: AcceleratorState
    gradient_state: GradientState
    dataloader_config: DataLoaderConfiguration
    _models: list[tuple[Any, Any]]

    if TYPE_CHECKING:

        def _track(self, kind: str, obj: Any) -> Any: ...

        def prepare_scheduler(self, scheduler: Any) -> Any: ...

    def prepare(self, *objects: Any) -> Any:
        """Prepare models, optimizers and data loaders for this run; other objects pass through.

        Models move to :attr:`device`, their forward runs under the ``forward_context``
        contributions (autocast), and they pass through each ``model_wrapper`` in order (DDP);
        optimizers pass through each ``optimizer_wrapper`` and step through the ``around_step``
        and ``after_step`` contributions; data loaders are sharded across processes. Returns one object for one argument, else a tuple
        in the order given.
        """
        # Schedulers last, as in Accelerate, so each finds its prepared optimizer.
        firsts = [obj if _is_scheduler(obj) else self._prepare_one(obj) for obj in objects]
        prepared = tuple(self.prepare_scheduler(o) if _is_scheduler(o) else o for o in firsts)
        return prepared[0] if len(prepared) == 1 else prepared

    def _prepare_one(self, obj: Any) -> Any:
        import torch

        from accelkw_core.runtime.data_loader import PreparedDataLoader, prepare_data_loader
        from accelkw_core.runtime.optimizer import AcceleratedOptimizer

        if isinstance(obj, torch.nn.Module):
            return self.prepare_model(obj)
        if isinstance(obj, AcceleratedOptimizer | PreparedDataLoader):
            return obj
        if isinstance(obj, torch.optim.Optimizer):
            return self.prepare_optimizer(obj)
        if isinstance(obj, torch.utils.data.DataLoader):
            loader = prepare_data_loader(
                obj, self.state, self.gradient_state.loaders, self.dataloader_config
            )
            return self._track("data_loaders", loader)
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
        """``model`` on :attr:`device`, its forward under the forward contexts, then wrapped."""
        original = model.to(self.state.device)
        patch_forward(original, self.state)
        wrapped = self._wrap(MODEL_WRAPPER, original)
        self._models.append((wrapped, original))
        return wrapped

    def prepare_optimizer(self, optimizer: Any) -> Any:
        """``optimizer`` through every optimizer wrapper, stepping through the step chain."""
        from accelkw_core.runtime.optimizer import AcceleratedOptimizer
        from accelkw_core.runtime.stepping import build_step

        inner = self._wrap(OPTIMIZER_WRAPPER, optimizer)
        around = self.state.values(AROUND_STEP)
        after = self.state.values(AFTER_STEP)
        chain = build_step(around, after) if around or after else None
        prepared = AcceleratedOptimizer(inner, chain, self.gradient_state, self.state)
        return self._track("optimizers", prepared)

    def unwrap_model(
        self, model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> Any:
        """The model as it was before the handlers' wrappers (DDP, ...) were applied.

        With ``keep_fp32_wrapper=False`` its forward no longer runs under the forward contexts.
        With ``keep_torch_compile=True`` (Accelerate's default) a model that was compiled comes
        back compiled: the ``torch.compile`` wrapper when it wraps the model itself. When it
        wraps another wrapper (DDP), the model comes back uncompiled with a warning, where
        Accelerate rewires the prepared model to skip that wrapper (docs/migrating.md).
        """
        for wrapped, original in self._models:
            if wrapped is model or original is model:
                if not keep_fp32_wrapper:
                    unpatch_forward(original)
                return _compiled_around(wrapped, original) if keep_torch_compile else original
        # Not prepared here: peel the usual wrappers (DDP, DataParallel, torch.compile).
        compiled = model if hasattr(model, "_orig_mod") else None
        while True:
            inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
            if inner is None:
                break
            model = inner
        return _compiled_around(compiled, model) if keep_torch_compile and compiled else model


def _compiled_around(wrapped: Any, original: Any) -> Any:
    """``wrapped`` when it is ``torch.compile(original)``; else ``original`` (warned if compiled)."""
    inner = getattr(wrapped, "_orig_mod", None)
    if inner is None:
        return original
    if inner is original:
        return wrapped
    warnings.warn(
        f"unwrap_model: the compiled model wraps a {type(inner).__name__}, not the model "
        "itself; returning the uncompiled model (pass keep_torch_compile=False to silence this)",
        stacklevel=3,
    )
    return original


def _is_scheduler(obj: Any) -> bool:
    import torch

    from accelkw_core.runtime.scheduler import AcceleratedScheduler

    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler | AcceleratedScheduler)
