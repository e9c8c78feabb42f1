"""The set-up of accelkw's own logging: the ``accelkw`` logger, ``accelkw.<handler>`` under it.

(The logger a script asks for, Accelerate's ``get_logger``, is :mod:`accelkw_core.logging`.)

Quiet by default, as a library should be: a ``NullHandler``, and the ``accelkw`` logger at
``WARNING`` unless the application set its level first, so a script's
``logging.basicConfig(level=logging.INFO)`` shows its own INFO lines and none of accelkw's.
``ACCELKW_LOG_LEVEL=INFO`` prints accelkw's lines to stderr, from the main process only (the
others stay at ``WARNING``: each process applies the same handlers, so their lines would
repeat); ``DEBUG`` prints every process's, with apply and teardown timings. An application
asks for them in code with ``logging.getLogger("accelkw").setLevel(...)``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

__all__ = ["LOGGER", "configure_from_env"]

LOGGER = logging.getLogger("accelkw")
LOGGER.addHandler(logging.NullHandler())
if LOGGER.level == logging.NOTSET:  # a level the application chose first is kept
    LOGGER.setLevel(logging.WARNING)
_STDERR = "accelkw-stderr"


def configure_from_env(env: Mapping[str, str] | None = None) -> None:
    """Apply ``ACCELKW_LOG_LEVEL``: a stderr handler at that level, added once per process.

    Below ``DEBUG``'s detail, only the main process (``RANK`` 0, or unset) turns up its level.
    """
    from accelkw_core.facts.environment import env_int, env_log_level

    env = os.environ if env is None else env
    level = env_log_level(env)
    if level is None:
        return
    if level != "DEBUG" and env_int(env, "RANK", 0, 0) != 0:
        level = "WARNING"
    LOGGER.setLevel(level)
    if not any(h.get_name() == _STDERR for h in LOGGER.handlers):
        handler = logging.StreamHandler()
        handler.set_name(_STDERR)
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        LOGGER.addHandler(handler)
