"""Output helpers shared by the commands: aligned tables and JSON-safe values."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["jsonable", "print_json", "table"]


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: enums by value, durations in seconds, callables by name."""
    import enum

    if isinstance(value, enum.Enum):  # before str/int: a StrEnum member is also a str
        return jsonable(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    from datetime import timedelta

    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"
    return repr(value)


def print_json(data: Any) -> None:
    import json

    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
