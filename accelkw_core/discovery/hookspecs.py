"""The hook specifications plugins implement. Every hook name starts with ``accelkw_``.

The core calls each through pluggy: ``accelkw_register_handlers`` and
``accelkw_register_trackers`` are *historic* (``pm.hook.<name>.call_historic``), so pluggy calls
a plugin's implementation once, as the plugin is registered; the others are called with
``pm.hook.<name>(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from accelkw_core.contract.handler import KwargsHandler
    from accelkw_core.contract.state_view import AcceleratorState
    from accelkw_core.contract.tracker import GeneralTracker

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "accelkw"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(historic=True)
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute handler classes by calling ``register(HandlerClass)`` once for each.

    Called once per plugin, as it is registered (so a wrapper implementation is refused). An
    exception here, or a class ``register`` refuses, marks the plugin ``failed``; the others
    keep working.

    :param register: takes a ``KwargsHandler`` dataclass; the core attaches the plugin's name
        and distribution, validates the class and reports a name claimed twice as a conflict.

    Example::

        @hookimpl
        def accelkw_register_handlers(register):
            register(SeedKwargs)
    """


@hookspec(historic=True)
def accelkw_register_trackers(register: Callable[[type[GeneralTracker]], None]) -> None:
    """Contribute tracker classes by calling ``register(TrackerClass)`` once for each.

    Called once per plugin, as it is registered, like ``accelkw_register_handlers``. A tracker
    class subclasses :class:`accelkw_core.tracking.GeneralTracker` and sets ``name`` (what
    ``Accelerator(log_with=...)`` calls it), ``requires_logging_directory`` and a ``tracker``
    property. An exception here, or a class ``register`` refuses, marks the plugin ``failed``.

    :param register: takes a ``GeneralTracker`` subclass; the core attaches the plugin's name
        and distribution, validates the class and reports a name claimed twice as a conflict.

    Example::

        @hookimpl
        def accelkw_register_trackers(register):
            register(TensorBoardTracker)
    """


@hookspec
def accelkw_state_ready(state: AcceleratorState) -> None:
    """Called once every handler has been applied to ``state``, before training starts.

    Only plugins whose handlers take part in the run hear it (a plugin whose handler is
    disabled does not); a plugin that contributes no handler always does.

    :param state: the composed ``AcceleratorState``; read its facts, log and contributions.

    Example::

        @hookimpl
        def accelkw_state_ready(state):
            state.record("mylogger", f"run has {state.world_size} processes")
    """


@hookspec
def accelkw_env_info(info: dict[str, Any]) -> None:
    """Add lines to ``accelkw env`` (the bug-report summary).

    :param info: a mapping of label to value; add your own keys.

    Example::

        @hookimpl
        def accelkw_env_info(info):
            info["my-plugin backend"] = "gloo"
    """
