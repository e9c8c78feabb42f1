"""Conversions a precision's contributions share: half-precision outputs back to float32.

A handler that runs forwards in float16 or bfloat16 (autocast, fp8 training) returns float32
outputs from a prepared model, as Accelerate's ``convert_outputs_to_fp32`` does; each such
handler contributes the same converter to ``FORWARD_OUTPUT``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["fp32_outputs"]


def fp32_outputs() -> Callable[[Any], Any]:
    """A converter of the float16/bfloat16 tensors in a forward's outputs (nested in lists,
    tuples, named tuples and dicts) to float32; float32 tensors pass through uncopied.

    Build it once, at plan time: it runs after every forward of a prepared model, so it imports
    nothing and builds nothing per call.
    """
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
