"""The Arabic import table of docs/ar/migrating.md lists exactly the names of ``porting.NAMES``.

The English table is generated from ``accelkw_core.tools.porting.NAMES`` (``python
docs/refgen.py --write-names``, checked by tests/test_porting.py) and left out of the hash the
Arabic page records, so a name added, removed or moved would not make the Arabic page stale. Its
Arabic copy has the same two code columns and a translated note: this test compares the code
columns row by row with ``NAMES``, and asks for a note exactly where the English row has one.
The Arabic notes are written by the generator too, from the texts the table's opening marker
gives (``module.Name: note``); a changed English note changes the hash the page records.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

from accelkw_core.tools.porting import NAMES
from tests.conftest import REPO

DOCS = REPO / "docs"
PAGE = DOCS / "ar" / "migrating.md"
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


def _docs_module(name: str) -> ModuleType:
    """``docs/refgen.py`` or ``docs/ar_sync.py``, imported as when run as a script."""
    if str(DOCS) not in sys.path:
        sys.path.append(str(DOCS))
    return importlib.import_module(name)


def test_the_arabic_notes_come_from_the_opening_marker_and_name_only_rows_with_a_note() -> None:
    refgen = _docs_module("refgen")
    page = PAGE.read_text(encoding="utf-8")
    # Regenerating the committed page (python docs/refgen.py --write-names) keeps its notes.
    assert refgen.with_names_table(page, "ar") == page
    marker = (
        refgen.NAMES_OPEN
        + "\naccelerate.ProfileKwargs, accelerate.utils.ProfileKwargs: من accelkw-profile\n-->\n"
    )
    table = refgen.with_names_table(f"قبل\n{marker}\n{refgen.NAMES_END}\nبعد\n", "ar")
    assert table.startswith("قبل\n" + marker) and table.endswith(refgen.NAMES_END + "\nبعد\n")
    assert "| `from accelerate import ProfileKwargs` | " in table
    assert table.count("| من accelkw-profile |") == 2
    # A noted row left untranslated shows its English note, marked (docs/ar_sync.py refuses it).
    assert "| (بالإنجليزية) served from its plugin, accelkw-ddp" in table
    for key in ("accelerate.NoSuchName", "accelerate.Accelerator"):  # no row; a row, no note
        with pytest.raises(refgen.DocsError, match=key):
            refgen.accelerate_names_table("ar", {key: "ملاحظة"})
    twice = marker.replace("-->", "accelerate.ProfileKwargs: مرة أخرى\n-->")
    with pytest.raises(refgen.DocsError, match=r"translates accelerate\.ProfileKwargs twice"):
        refgen.with_names_table(f"{twice}{refgen.NAMES_END}\n", "ar")
    with pytest.raises(refgen.DocsError, match=r"expected 'module\.Name: note'"):
        refgen.with_names_table(
            f"{marker.replace('Kwargs: ', 'Kwargs ')}{refgen.NAMES_END}\n", "ar"
        )


def test_a_changed_english_note_makes_the_arabic_page_stale_a_new_plain_name_not() -> None:
    ar_sync, refgen = _docs_module("ar_sync"), _docs_module("refgen")
    row = "| `from accelerate.utils import {0}` | `from accelkw_core.utils import {0}` | {1} |\n"
    head = f"# Migrating\n\n{refgen.NAMES_BEGIN}\n| Accelerate | accelkw | note |\n|---|---|---|\n"
    english = head + row.format("LoggerType", "trackers: docs/trackers.md") + refgen.NAMES_END
    digest = ar_sync.source_hash(english, "migrating.md")
    plain = english.replace(refgen.NAMES_END, row.format("set_seed", "") + refgen.NAMES_END)
    assert ar_sync.source_hash(plain, "migrating.md") == digest
    reworded = english.replace("trackers: docs", "the trackers: docs")
    assert ar_sync.source_hash(reworded, "migrating.md") != digest
