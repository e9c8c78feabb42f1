"""Chrome trace files (safe export, no clobbering) and the profiler stand-in of unselected ranks."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from accelkw_core.plugin import ConfigError

__all__ = ["NoOpProfiler", "check_overwritable", "export_trace", "prepare_trace_dir"]


class NoOpProfiler:
    """What ``profile()`` yields on a rank that does not profile: the loop's calls do nothing.

    It has the methods a training loop calls on a ``torch.profiler.profile`` (``step``,
    ``start``, ``stop``), so one loop runs unchanged on every rank.
    """

    profiling = False

    def step(self) -> None:
        """Do nothing (a profiler would advance its schedule)."""

    def start(self) -> None:
        """Do nothing."""

    def stop(self) -> None:
        """Do nothing."""

    def __repr__(self) -> str:
        return "NoOpProfiler()"


def prepare_trace_dir(directory: str) -> None:
    """Create ``directory`` (and parents) if needed; one that cannot be made is a ConfigError."""
    try:
        os.makedirs(directory, exist_ok=True)
    except (OSError, ValueError) as exc:
        # A file in the way, a missing or read-only parent, a NUL byte: all say the same thing.
        raise ConfigError(
            "profile", "output_trace_dir", directory, f"a directory that can be created ({exc})"
        ) from None


def check_overwritable(path: str) -> None:
    """Refuse ``path`` unless it is absent or an earlier Chrome trace (JSON with traceEvents)."""
    if not os.path.lexists(path):
        return
    ok = False
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            ok = isinstance(data, dict) and "traceEvents" in data
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            ok = False
    if not ok:
        raise ConfigError(
            "profile",
            "output_trace_dir",
            os.path.dirname(path),
            f"a directory where {os.path.basename(path)} is absent or an earlier Chrome trace; "
            f"{path} exists and is not one, so it is not overwritten "
            "(move it away or choose another output_trace_dir)",
        )


def export_trace(profiler: Any, path: str) -> bool:
    """Write ``profiler``'s Chrome trace to ``path`` atomically; ``False`` when nothing was recorded.

    The trace is written beside ``path`` and renamed into place, so a crash never leaves a
    half-written file where a reader expects a trace.
    """
    if getattr(profiler, "profiler", True) is None:
        # A schedule that never reached an active step recorded nothing; torch would fail with
        # an AssertionError, and the run itself went fine, so say so instead of crashing.
        warnings.warn(
            f"profile: the profiler recorded no step (its schedule never became active), "
            f"so no trace was written to {path}",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    check_overwritable(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        profiler.export_chrome_trace(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True
