"""Each process's random states, saved with a checkpoint in Accelerate's format.

``random_states_<rank>.pkl`` holds the step, Python's ``random.getstate()``, NumPy's
``np.random.get_state()`` (when NumPy is installed), torch's CPU and CUDA generator states and
each prepared data loader's position (its epoch and, mid-pass, the state its shuffling
generator drew the pass's order from). The layout is Accelerate's, so either framework resumes
from the other's file; it is read with ``weights_only=True`` and only NumPy's array types
allowed, as Accelerate reads it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = [
    "loader_positions",
    "numpy_safe_globals",
    "random_states",
    "set_loader_positions",
    "set_random_states",
]


def random_states(data_loaders: Sequence[Any], step: int) -> dict[str, Any]:
    """This process's random states (python, numpy when installed, torch, CUDA when present)."""
    import torch

    states: dict[str, Any] = {"step": step, "random_state": random.getstate()}
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        states["numpy_random_seed"] = np.random.get_state()
    states["torch_manual_seed"] = torch.get_rng_state()
    if torch.cuda.is_available():
        states["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    states["data_loaders"] = loader_positions(data_loaders)
    return states


def loader_positions(data_loaders: Sequence[Any]) -> list[Any]:
    """Each prepared loader's position (what it holds is the loader's own business)."""
    return [
        loader.position() if hasattr(loader, "position") else {"epoch": 0, "generator": None}
        for loader in data_loaders
    ]


def set_loader_positions(positions: Sequence[Any], data_loaders: Sequence[Any]) -> None:
    """Give each prepared loader back a position :func:`loader_positions` took."""
    for loader, saved in zip(data_loaders, positions, strict=False):
        if hasattr(loader, "resume_position"):
            loader.resume_position(saved)


def set_random_states(states: dict[str, Any], data_loaders: Sequence[Any]) -> None:
    """Restore what :func:`random_states` (or Accelerate's ``save_state``) saved."""
    import torch

    version, internal, gauss = states["random_state"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy_random_seed" in states:
        import numpy as np

        np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])
    set_loader_positions(states.get("data_loaders", ()), data_loaders)


@contextlib.contextmanager
def numpy_safe_globals() -> Iterator[None]:
    """Let ``torch.load(weights_only=True)`` rebuild NumPy arrays (a NumPy random state)."""
    import torch

    try:
        import codecs

        import numpy as np
    except ImportError:
        yield
        return
    allowed: list[Any] = [np.ndarray, np.dtype, codecs.encode]
    core = getattr(np, "_core", None) or np.core
    allowed.append(core.multiarray._reconstruct)
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed.append(dtypes.UInt32DType)
    with torch.serialization.safe_globals(allowed):
        yield
