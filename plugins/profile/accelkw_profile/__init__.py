"""accelkw-profile: ``ProfileKwargs``, ``torch.profiler`` set-up and Chrome trace export."""

from accelkw_profile.handler import ProfileKwargs
from accelkw_profile.trace import NoOpProfiler

__all__ = ["NoOpProfiler", "ProfileKwargs"]
