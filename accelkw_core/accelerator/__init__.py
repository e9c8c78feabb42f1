"""The ``Accelerator``: one class over the runtime, delegating to collaborators with one job each."""

from __future__ import annotations

from accelkw_core.accelerator.accelerator import Accelerator
from accelkw_core.runtime.profiling import NoProfiler

__all__ = ["Accelerator", "NoProfiler"]
