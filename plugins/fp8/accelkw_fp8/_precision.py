"""The precision a forward runs in under fp8: bfloat16 autocast outside the float8 matmuls.

Accelerate runs every forward of an fp8 model under ``torch.autocast(dtype=torch.bfloat16)``
(the layers left in high precision, and everything that is not a converted linear, compute in
bfloat16) and converts the half-precision outputs back to float32. The autocast factory is
here, resolved once at plan time so a forward costs what a bare ``torch.autocast`` costs; the
conversion is the core's :func:`accelkw_core.plugin.fp32_outputs`, which the autocast handler
contributes too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["bf16_autocast"]


def bf16_autocast(device_type: str) -> Callable[[], AbstractContextManager[Any]]:
    """A zero-argument factory of ``torch.autocast(device_type, dtype=torch.bfloat16)``."""
    import torch

    return functools.partial(torch.autocast, device_type, dtype=torch.bfloat16)
