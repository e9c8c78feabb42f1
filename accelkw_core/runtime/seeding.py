"""``set_seed``: seed Python, NumPy and torch at once (Accelerate's ``accelerate.utils.set_seed``)."""

from __future__ import annotations

import os
import random

from accelkw_core.errors import ConfigError

__all__ = ["set_seed"]


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed ``random``, NumPy (when installed), torch and every CUDA device with ``seed``.

    ``device_specific`` adds this process's rank to the seed (the process group's rank, else
    ``RANK``), so each process draws differently; ``deterministic`` also calls
    ``torch.use_deterministic_algorithms(True)``.
    """
    import torch

    if device_specific:
        seed += _process_index()
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # NumPy is optional; there is nothing to seed without it
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # safe without CUDA: queued until CUDA initialises
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _process_index() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    raw = os.environ.get("RANK", "0")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError("environment", "RANK", raw, "an integer >= 0") from None
