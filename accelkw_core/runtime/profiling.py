"""Profiling a block of the run through the ``profiler`` extension point.

:class:`Profiling` is the ``Accelerator``'s collaborator for ``accelerator.profile()``: it enters
the contributed profiler (or the one a handler passed for the call contributes), and without
one runs the block unprofiled with a :class:`NoProfiler` and one warning.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.points import PROFILER
from accelkw_core.discovery.catalog import provider_hint
from accelkw_core.runtime import collectives as ops
from accelkw_core.runtime.composing.planning import override_values

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = ["NoProfiler", "Profiling"]


class NoProfiler:
    """What ``Accelerator.profile()`` yields when no profiler is configured: ``step()`` does nothing."""

    def step(self) -> None:
        """Nothing to advance."""


class Profiling:
    """The profiler of one run (``state``'s ``profiler`` contribution)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self._warned = False  # the missing profiler is said once per run

    @contextlib.contextmanager
    def profile(self, profile_handler: Any) -> Iterator[Any]:
        """Profile the block; yields the profiler (``NoProfiler`` with none configured)."""
        if profile_handler is not None:
            factories = override_values(self.state, profile_handler, PROFILER, "profile")
        else:
            factories = self.state.values(PROFILER)
        if factories:
            manager: AbstractContextManager[Any] = factories[0]()
        else:
            if not self._warned:
                self._warned = True
                message = (
                    "profile(): no profiler is configured, so the block runs unprofiled "
                    f"({provider_hint('profiler')}, or pass profile_handler=)"
                )
                self.state.record("accelerator", message, applied=False)
                # this generator, contextlib's __enter__, the caller's with statement
                warnings.warn(message, stacklevel=3)
            manager = contextlib.nullcontext(NoProfiler())
        with manager as profiler:
            yield profiler
        # Every rank leaves together, so no rank reads a trace another is still writing.
        if self.state.distributed and ops.has_group():
            ops.barrier(self.state)
