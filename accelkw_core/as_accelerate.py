"""What a ported ``import accelerate`` binds: ``accelerate.__version__``, ``accelerate.state``, ...

``port_imports`` rewrites ``import accelerate`` as ``import accelkw_core.as_accelerate as
accelerate``. Scripts read the version to choose code written for an Accelerate API
(``version.parse(accelerate.__version__) >= version.parse("0.16.0")`` guards the save-state
hooks in diffusers' scripts) and call ``accelerate.state.is_initialized()``; accelkw follows
Accelerate 1.15.0's API, so that is the version this module reports.
"""

from __future__ import annotations

from accelkw_core import logging, state, utils
from accelkw_core.accelerator import Accelerator

__all__ = ["Accelerator", "__version__", "logging", "state", "utils"]

#: The Accelerate API accelkw follows (not accelkw's own version: ``accelkw_core.__version__``).
__version__ = "1.15.0"
