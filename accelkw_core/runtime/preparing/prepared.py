"""The record of what a run prepared: models, optimizers, schedulers, data loaders, registered objects.

The ``Accelerator``'s collaborators share one :class:`Prepared`: preparing adds to it,
checkpoints save and load what it holds, stepping unscales its optimizers, ``free_memory``
empties it. It also answers what a prepared model was before the handlers wrapped it.

Nothing here imports torch.
"""

from __future__ import annotations

import warnings
from typing import Any

from accelkw_core.runtime.stepping.forward import unpatch_forward

__all__ = ["Prepared"]


class Prepared:
    """What ``prepare`` and ``register_for_checkpointing`` handed back or took, in order.

    ``models`` pairs each prepared (wrapped) model with the model it was given.
    """

    __slots__ = ("custom", "data_loaders", "models", "optimizers", "schedulers")

    def __init__(self) -> None:
        self.models: list[tuple[Any, Any]] = []
        self.optimizers: list[Any] = []
        self.schedulers: list[Any] = []
        self.data_loaders: list[Any] = []
        #: Objects registered with ``register_for_checkpointing``.
        self.custom: list[Any] = []

    def clear(self) -> None:
        """Forget every prepared and registered object."""
        for kept in (self.models, self.optimizers, self.schedulers, self.data_loaders, self.custom):
            kept.clear()

    def unwrap(
        self, model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> Any:
        """``model`` as it was before the handlers' wrappers (``Accelerator.unwrap_model``)."""
        for wrapped, original in self.models:
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

    def __repr__(self) -> str:
        return (
            f"Prepared(models={len(self.models)}, optimizers={len(self.optimizers)}, "
            f"schedulers={len(self.schedulers)}, data_loaders={len(self.data_loaders)}, "
            f"custom={len(self.custom)})"
        )


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
        # this function, Prepared.unwrap, Accelerator.unwrap_model, its caller
        stacklevel=4,
    )
    return original
