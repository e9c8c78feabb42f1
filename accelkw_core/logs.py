"""accelkw logs through the standard library: the ``accelkw`` logger and ``accelkw.<handler>``.

Quiet by default, as a library should be (a ``NullHandler``); an application routes the records
like any library's, and ``ACCELKW_LOG_LEVEL=INFO`` (or ``DEBUG``, with apply and teardown
timings) prints them to stderr without any code.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

__all__ = ["LOGGER", "configure_from_env"]

LOGGER = logging.getLogger("accelkw")
LOGGER.addHandler(logging.NullHandler())
_STDERR = "accelkw-stderr"


def configure_from_env(env: Mapping[str, str] | None = None) -> None:
    """Apply ``ACCELKW_LOG_LEVEL``: a stderr handler at that level, added once per process."""
    from accelkw_core.facts.environment import env_log_level

    level = env_log_level(os.environ if env is None else env)
    if level is None:
        return
    LOGGER.setLevel(level)
    if not any(h.get_name() == _STDERR for h in LOGGER.handlers):
        handler = logging.StreamHandler()
        handler.set_name(_STDERR)
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        LOGGER.addHandler(handler)
