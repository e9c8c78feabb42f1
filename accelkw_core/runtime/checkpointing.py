"""``save_state``/``load_state``/``save_model`` in Accelerate's file layout, written with torch.save.

One folder per checkpoint: ``pytorch_model.bin`` (``pytorch_model_1.bin``, ... for more models),
``optimizer.bin``, ``scheduler.bin``, ``custom_checkpoint_<i>.pkl`` for objects registered with
``register_for_checkpointing``, ``random_states_<rank>.pkl`` per process, and one
``<key>.pt`` per contribution to the ``checkpoint`` point (keyed by handler name). The main
process writes the shared files; every process writes its own random states. Everything is
read back with ``torch.load(weights_only=True)``: loading a checkpoint runs no pickled code.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError

if TYPE_CHECKING:
    from accelkw_core.runtime.state import AcceleratorState

__all__ = [
    "Checkpointed",
    "load_checkpoint",
    "model_state_dict",
    "numbered",
    "random_states",
    "save_checkpoint",
    "set_random_states",
]

MODEL = "pytorch_model.bin"
SAFE_MODEL = "model.safetensors"


class Checkpointed:
    """What a checkpoint holds: prepared models, optimizers, schedulers, loaders, custom objects."""

    def __init__(
        self,
        models: Sequence[Any],
        optimizers: Sequence[Any],
        schedulers: Sequence[Any],
        data_loaders: Sequence[Any],
        custom: Sequence[Any],
        step: int = 0,
    ) -> None:
        self.models = list(models)
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


def _directory(value: Any, what: str) -> Path:
    if value is None or (isinstance(value, str) and not value):
        raise ConfigError(
            "accelerator",
            what,
            value,
            "a directory path (automatic checkpoint naming, project_dir, is not supported)",
        )
    try:
        return Path(os.fspath(value))
    except TypeError:
        raise ConfigError(
            "accelerator", what, value, "a directory path (str or os.PathLike)"
        ) from None


def model_state_dict(state: AcceleratorState, model: Any, unwrapped: Any) -> dict[str, Any]:
    """``model``'s weights through the ``model_state`` contribution, else ``unwrapped.state_dict()``."""
    contributed = state.values("model_state")
    if contributed:
        return dict(contributed[0].state_dict(model))
    return dict(unwrapped.state_dict())


def _load_model(
    state: AcceleratorState, model: Any, weights: dict[str, Any], **kwargs: Any
) -> None:
    contributed = state.values("model_state")
    if contributed:
        contributed[0].load_state_dict(model, weights)
    else:
        model.load_state_dict(weights, **kwargs)


def random_states(data_loaders: Sequence[Any], step: int) -> dict[str, Any]:
    """This process's random states (python, numpy when installed, torch, CUDA when present)."""
    import torch

    version, internal, gauss = random.getstate()
    states: dict[str, Any] = {
        "step": step,
        "random_state": (version, list(internal), gauss),
        "torch_manual_seed": torch.get_rng_state(),
    }
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        states["numpy_random_seed"] = (kind, np.asarray(keys).tolist(), pos, has_gauss, cached)
    if torch.cuda.is_available():
        states["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    states["data_loaders"] = [
        {
            "epoch": getattr(loader, "epoch", 0),
            "generator": (
                loader.synchronized_generator.get_state()
                if getattr(loader, "synchronized_generator", None) is not None
                else None
            ),
        }
        for loader in data_loaders
    ]
    return states


def set_random_states(states: dict[str, Any], data_loaders: Sequence[Any]) -> None:
    """Restore what :func:`random_states` returned."""
    import torch

    version, internal, gauss = states["random_state"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy_random_seed" in states:
        import numpy as np

        kind, keys, pos, has_gauss, cached = states["numpy_random_seed"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])
    for loader, saved in zip(data_loaders, states.get("data_loaders", ()), strict=False):
        if hasattr(loader, "epoch"):
            loader.epoch = saved["epoch"]
        generator = getattr(loader, "synchronized_generator", None)
        if generator is not None and saved["generator"] is not None:
            generator.set_state(saved["generator"])


def save_checkpoint(
    state: AcceleratorState,
    output_dir: Any,
    what: Checkpointed,
    weights: Sequence[dict[str, Any]],
) -> Path:
    """Write ``what`` (with the models' ``weights``) and the handlers' checkpoints to ``output_dir``."""
    import torch

    from accelkw_core.runtime import collectives as ops

    folder = _directory(output_dir, "output_dir")
    folder.mkdir(parents=True, exist_ok=True)
    if state.is_main_process:
        for i, model_weights in enumerate(weights):
            torch.save(model_weights, folder / numbered(MODEL, i))
        for i, optimizer in enumerate(what.optimizers):
            torch.save(optimizer.state_dict(), folder / numbered("optimizer.bin", i))
        for i, scheduler in enumerate(what.schedulers):
            torch.save(scheduler.state_dict(), folder / numbered("scheduler.bin", i))
        for key, obj in state.keyed("checkpoint").items():
            torch.save(obj.state_dict(), folder / f"{key}.pt")
        for i, obj in enumerate(what.custom):
            torch.save(obj.state_dict(), folder / f"custom_checkpoint_{i}.pkl")
    torch.save(
        random_states(what.data_loaders, what.step), folder / f"random_states_{state.rank}.pkl"
    )
    if state.distributed and ops.has_group():
        ops.barrier(state)
    return folder


def _read(path: Path, what: str) -> Any:
    import torch

    if not path.is_file():
        raise FileNotFoundError(f"load_state: {what} file {path} does not exist")
    return torch.load(path, map_location="cpu", weights_only=True)


def _read_model(folder: Path, index: int) -> dict[str, Any]:
    safe = folder / numbered(SAFE_MODEL, index)
    plain = folder / numbered(MODEL, index)
    if not plain.is_file() and safe.is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise FileNotFoundError(
                f"load_state: {safe} is a safetensors file (written by Accelerate) and "
                "safetensors is not installed: pip install safetensors"
            ) from None
        return dict(load_file(safe))
    return dict(_read(plain, "model weights"))


def load_checkpoint(
    state: AcceleratorState, input_dir: Any, what: Checkpointed, **load_model_kwargs: Any
) -> int | None:
    """Read back what :func:`save_checkpoint` wrote into the objects of ``what``.

    Returns the saved ``step``, or ``None`` when this process's random states could not be read
    (a warning says why; the rest is loaded).
    """
    folder = _directory(input_dir, "input_dir")
    if not folder.is_dir():
        raise FileNotFoundError(f"load_state: checkpoint directory {folder} does not exist")
    for i, model in enumerate(what.models):
        _load_model(state, model, _read_model(folder, i), **load_model_kwargs)
    for i, optimizer in enumerate(what.optimizers):
        optimizer.load_state_dict(_read(folder / numbered("optimizer.bin", i), "optimizer"))
    for i, scheduler in enumerate(what.schedulers):
        scheduler.load_state_dict(_read(folder / numbered("scheduler.bin", i), "scheduler"))
    for key, obj in state.keyed("checkpoint").items():
        obj.load_state_dict(_read(folder / f"{key}.pt", f"handler {key!r} checkpoint"))
    for i, obj in enumerate(what.custom):
        obj.load_state_dict(_read(folder / f"custom_checkpoint_{i}.pkl", "custom checkpoint"))
    path = folder / f"random_states_{state.rank}.pkl"
    try:
        states = _read(path, "random states")
        set_random_states(states, what.data_loaders)
    except Exception as exc:
        warnings.warn(
            f"load_state: could not restore the random states from {path} "
            f"({type(exc).__name__}: {exc}); the run continues with the current ones",
            stacklevel=3,
        )
        return None
    return int(states.get("step", 0))
