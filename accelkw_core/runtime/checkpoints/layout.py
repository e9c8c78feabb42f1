"""What a checkpoint folder holds and what its files are called (Accelerate's names).

``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``;
``model_1.safetensors``, ... for more models), ``optimizer.bin``, ``scheduler.bin``,
``custom_checkpoint_<i>.pkl`` for objects registered with ``register_for_checkpointing``,
``random_states_<rank>.pkl`` per process, one ``<key>.pt`` per handler contributing a
``state_dict()`` to the ``checkpoint`` point, what each handler that owns its checkpoint writes,
and the manifest, last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MODEL", "SAFE_MODEL", "Checkpointed", "numbered"]

MODEL = "pytorch_model.bin"
SAFE_MODEL = "model.safetensors"


class Checkpointed:
    """What a checkpoint holds: prepared models, optimizers, schedulers, loaders, custom objects.

    ``models`` are the prepared (wrapped) models, ``unwrapped`` the same models without the
    handlers' wrappers: their state dicts carry Accelerate's key names (no ``module.``).
    ``given`` are the models as they were passed to ``prepare`` (not the DDP or
    ``torch.compile`` wrapper): what save-state and load-state hooks receive, as in Accelerate.
    """

    def __init__(
        self,
        models: Sequence[Any],
        optimizers: Sequence[Any],
        schedulers: Sequence[Any],
        data_loaders: Sequence[Any],
        custom: Sequence[Any],
        step: int = 0,
        unwrapped: Sequence[Any] | None = None,
        given: Sequence[Any] | None = None,
    ) -> None:
        self.models = list(models)
        self.unwrapped = list(unwrapped) if unwrapped is not None else list(models)
        self.given = list(given) if given is not None else list(self.unwrapped)
        self.optimizers = list(optimizers)
        self.schedulers = list(schedulers)
        self.data_loaders = list(data_loaders)
        self.custom = list(custom)
        self.step = step


def numbered(name: str, index: int) -> str:
    """``optimizer.bin`` for the first, ``optimizer_1.bin`` for the second (Accelerate's names)."""
    if index == 0:
        return name
    stem, dot, suffix = name.partition(".")
    return f"{stem}_{index}{dot}{suffix}"
