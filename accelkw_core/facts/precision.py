"""The mixed-precision modes a run can ask for (Accelerate's, on CPU and CUDA alike).

``"fp8"`` is a mode like the others, but nothing in the core trains in it: an installed
handler that provides the ``fp8`` capability does (the core asks for the capability, never for
a plugin); without one, a run asking for it stops in one line naming what to install.
"""

from __future__ import annotations

__all__ = ["FP8", "MIXED_PRECISION_MODES"]

FP8 = "fp8"
MIXED_PRECISION_MODES = ("no", "fp16", "bf16", FP8)
