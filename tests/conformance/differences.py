"""The table of deliberate differences in docs/migrating.md, as the conformance suite reads it.

Each row is ``| `id` | what differs | why |`` under the "Deliberate differences" heading. A test
that finds the two frameworks differing names the row that explains it with :func:`listed`;
``test_differences_table.py`` fails on a row that no test names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MIGRATING = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
HEADING = "## Deliberate differences"
_ROW = re.compile(r"^\|\s*`(?P<id>[a-z0-9-]+)`\s*\|(?P<what>.*)\|(?P<why>.*)\|\s*$")


@dataclass(frozen=True)
class Difference:
    id: str
    what: str
    why: str


class TableError(AssertionError):
    """The table is missing, malformed, or has a duplicate or empty row."""


@cache
def table() -> dict[str, Difference]:
    """The rows of the table by id, in order; raises :class:`TableError` when malformed."""
    text = MIGRATING.read_text(encoding="utf-8")
    if HEADING not in text:
        raise TableError(f"{MIGRATING}: no {HEADING!r} section")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, Difference] = {}
    lines = [line for line in section.splitlines() if line.startswith("|")]
    if len(lines) < 3 or not lines[0].lower().startswith("| id |"):
        raise TableError(f"{MIGRATING}: the section has no '| id | what differs | why |' table")
    for line in lines[2:]:
        m = _ROW.match(line)
        if m is None:
            raise TableError(f"{MIGRATING}: malformed row (want | `id` | what | why |): {line}")
        what, why = m["what"].strip(), m["why"].strip()
        if not what or not why:
            raise TableError(f"{MIGRATING}: row {m['id']!r} lacks what differs or why")
        if m["id"] in rows:
            raise TableError(f"{MIGRATING}: row {m['id']!r} is listed twice")
        rows[m["id"]] = Difference(m["id"], what, why)
    return rows


def listed(difference_id: str) -> Difference:
    """The row ``difference_id``; fails the test when the table does not list it."""
    rows = table()
    if difference_id not in rows:
        raise AssertionError(
            f"the frameworks differ as {difference_id!r}, which the table of deliberate "
            f"differences in {MIGRATING} does not list; list it with its reason, or remove "
            "the difference. Listed: " + ", ".join(rows)
        )
    return rows[difference_id]
