"""The precision a forward runs in under fp8: bfloat16 autocast outside the float8 matmuls.

Accelerate runs every forward of an fp8 model under ``torch.autocast(dtype=torch.bfloat16)``
(the layers left in high precision, and everything that is not a converted linear, compute in
bfloat16) and converts the half-precision outputs back to float32. The same two contributions
here, resolved once at plan time so a forward costs what a bare ``torch.autocast`` costs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["bf16_autocast", "outputs_to_fp32"]


def bf16_autocast(device_type: str) -> Callable[[], AbstractContextManager[Any]]:
    """A zero-argument factory of ``torch.autocast(device_type, dtype=torch.bfloat16)``."""
    import torch

    return functools.partial(torch.autocast, device_type, dtype=torch.bfloat16)


def outputs_to_fp32() -> Callable[[Any], Any]:
    """A converter of float16/bfloat16 tensors (nested in lists, tuples, dicts) to float32."""
    import torch

    tensor, half = torch.Tensor, (torch.float16, torch.bfloat16)

    def convert(outputs: Any) -> Any:
        if isinstance(outputs, tensor):
            return outputs.float() if outputs.dtype in half else outputs
        if isinstance(outputs, dict):
            return type(outputs)({k: convert(v) for k, v in outputs.items()})
        if isinstance(outputs, tuple) and hasattr(outputs, "_fields"):
            return type(outputs)(*(convert(v) for v in outputs))
        if isinstance(outputs, list | tuple):
            return type(outputs)(convert(v) for v in outputs)
        return outputs

    return convert
