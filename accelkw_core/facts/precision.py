"""The mixed-precision modes a run can ask for (Accelerate's, on CPU and CUDA alike)."""

from __future__ import annotations

__all__ = ["MIXED_PRECISION_MODES"]

MIXED_PRECISION_MODES = ("no", "fp16", "bf16")
