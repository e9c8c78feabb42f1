"""The Arabic import table of docs/ar/migrating.md lists exactly the names of ``porting.NAMES``.

The English table is generated from ``accelkw_core.tools.porting.NAMES`` (``python
docs/refgen.py --write-names``, checked by tests/test_porting.py) and left out of the hash the
Arabic page records, so a name added, removed or moved would not make the Arabic page stale. Its
Arabic copy has the same two code columns and a translated note: this test compares the code
columns row by row with ``NAMES``, and asks for a note exactly where the English row has one.
"""

from __future__ import annotations

from accelkw_core.tools.porting import NAMES
from tests.conftest import REPO

PAGE = REPO / "docs" / "ar" / "migrating.md"
HEADER = "| Accelerate | accelkw | ملاحظة |"
NOT_PROVIDED = "غير متوفر"


def arabic_rows() -> list[tuple[str, str, str]]:
    """The rows of the Arabic import table: (Accelerate import, accelkw import, note)."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # after the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"docs/ar/migrating.md: a row of the import table: {line!r}"
        rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_the_arabic_import_table_has_every_name_of_porting_names_in_order() -> None:
    expected = [
        (
            f"`from {n.accelerate} import {n.name}`",
            f"`from {n.accelkw} import {n.name}`" if n.accelkw else NOT_PROVIDED,
        )
        for n in NAMES
    ]
    found = [(accelerate, ours) for accelerate, ours, _ in arabic_rows()]
    missing = [row for row in expected if row not in found]
    extra = [row for row in found if row not in expected]
    assert not missing and not extra, (
        "docs/ar/migrating.md's import table is out of step with porting.NAMES "
        f"(the English table: python docs/refgen.py --write-names); missing {missing}, extra {extra}"
    )
    assert found == expected, "docs/ar/migrating.md's import table lists the names in another order"


def test_the_arabic_import_table_has_a_note_where_the_english_has_one() -> None:
    for name, (_, _, note) in zip(NAMES, arabic_rows(), strict=True):
        assert bool(note) == bool(name.note), (name.accelerate, name.name, note)
