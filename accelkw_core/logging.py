"""``get_logger``: a standard ``logging`` logger that knows the run's processes (Accelerate's).

``logger = get_logger(__name__)`` at the top of a script, before any ``Accelerator``; then
``logger.info(...)`` logs on the main process only, ``main_process_only=False`` on every
process, ``in_order=True`` on every process one after the other, each line prefixed with
``[RANK i]``, and ``logger.warning_once(...)`` warns once per message. As in Accelerate, logging
before an ``Accelerator`` (or a ``PartialState()``) exists raises ``RuntimeError``: which process
is the main one is not known yet.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable, MutableMapping
from typing import Any

from accelkw_core.facts.environment import env_log_level
from accelkw_core.state import PartialState, state_exists

__all__ = ["MultiProcessAdapter", "get_logger"]


class MultiProcessAdapter(logging.LoggerAdapter[logging.Logger]):
    """A logger whose calls take ``main_process_only`` (default ``True``) and ``in_order``.

    ``in_order=True`` logs on every process in rank order (every process must make the call:
    the processes take turns at barriers); it overrides ``main_process_only``.
    """

    def __init__(self, logger: logging.Logger, extra: dict[str, Any] | None = None) -> None:
        super().__init__(logger, extra if extra is not None else {})
        self._warned: set[Hashable] = set()

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        msg, kwargs = super().process(msg, kwargs)
        # The record's file and line are the caller's, not this adapter's.
        kwargs.setdefault("stacklevel", 2)
        return f"[RANK {PartialState().process_index}] {msg}", kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if not state_exists():
            raise RuntimeError(
                "get_logger's logger cannot log before the run's processes are known: create "
                "the Accelerator (or a PartialState()) first"
            )
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        if not self.isEnabledFor(level):
            return
        msg, processed = self.process(msg, kwargs)
        kwargs = dict(processed)
        state = PartialState()
        if in_order:
            for rank in range(state.num_processes):
                if rank == state.process_index:
                    self.logger.log(level, msg, *args, **kwargs)
                state.wait_for_everyone()
        elif not main_process_only or state.is_main_process:
            self.logger.log(level, msg, *args, **kwargs)

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning(...)`` the first time these arguments are given to this logger only.

        Arguments that cannot be hashed are warned every time.
        """
        try:
            key: Hashable = (args, tuple(sorted(kwargs.items())))
            seen = key in self._warned
        except TypeError:
            self.warning(*args, **kwargs)
            return
        if not seen:
            self._warned.add(key)
            self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """The logger ``name`` (``logging.getLogger(name)``) as a :class:`MultiProcessAdapter`.

    ``log_level`` (``"INFO"``, ``"debug"``, ...), else ``ACCELERATE_LOG_LEVEL``, else
    ``ACCELKW_LOG_LEVEL``, sets the level of this logger and of the root logger, as Accelerate
    does; with none of them the levels are left as they are.
    """
    if log_level is None:
        log_level = os.environ.get("ACCELERATE_LOG_LEVEL") or env_log_level(os.environ)
    logger = logging.getLogger(name)
    if log_level is not None:
        logger.setLevel(log_level.upper())
        logging.getLogger().setLevel(log_level.upper())
    return MultiProcessAdapter(logger, {})
