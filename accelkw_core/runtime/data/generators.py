"""The process's global random generators, read and set as one (Python, NumPy, torch, CUDA).

A prepared loader reads them before each batch it fetches and when a pass begins, so that a
checkpoint can give a resumed run the draws the loader made ahead of the loop (a collate function
masking tokens, a random transform in ``__getitem__``). Imported by the prepared loader only.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import torch

__all__ = ["global_states", "set_global_states"]


def global_states() -> dict[str, Any]:
    """Python's, NumPy's (once NumPy is imported), torch's and CUDA's (once used) states.

    NumPy and CUDA are read only when this process has them loaded: a generator never loaded
    has drawn nothing, and reading CUDA's would start CUDA.
    """
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_global_states(states: dict[str, Any]) -> None:
    """Set every generator ``states`` holds (what :func:`global_states` read, or a part of it)."""
    if "python" in states:
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in states:
        import numpy as np

        np.random.set_state(states["numpy"])
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
