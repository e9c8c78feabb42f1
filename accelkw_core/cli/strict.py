"""Configuration warnings on the command line: printed as one line each, errors with ``--strict``."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator

from accelkw_core.errors import ConfigWarning

__all__ = ["config_warnings", "show_warning"]


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` for the command line: accelkw's own warnings as one line."""
    if category.__module__ == "accelkw_core.errors":
        print(f"accelkw: warning: {message}", file=sys.stderr)
    else:
        print(warnings.formatwarning(message, category, filename, lineno, line), file=sys.stderr)


@contextlib.contextmanager
def config_warnings() -> Iterator[list[str]]:
    """Collect the :class:`ConfigWarning` messages raised inside (into the list yielded).

    Each is printed as it would have been, when the block ends; other warnings pass through.
    """
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            yield found
        finally:
            # Shown even when the block fails: a typo warned about may explain the error.
            for w in caught:
                if issubclass(w.category, ConfigWarning):
                    if str(w.message) in found:
                        continue
                    found.append(str(w.message))
                show_warning(w.message, w.category, w.filename, w.lineno)
