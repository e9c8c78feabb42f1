"""The table of deliberate differences is well formed, and every row is used by a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conformance.differences import MIGRATING, TableError, listed, table

HERE = Path(__file__).resolve().parent


def referenced_ids() -> dict[str, list[str]]:
    """Each quoted row id in this folder's test modules, with the files that name it."""
    found: dict[str, list[str]] = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name in ("differences.py", Path(__file__).name):
            continue
        for difference_id in set(
            re.findall(r"[\"']([a-z0-9]+(?:-[a-z0-9]+)+)[\"']", path.read_text())
        ):
            found.setdefault(difference_id, []).append(path.name)
    return found


def test_the_table_parses_with_unique_ids_and_reasons() -> None:
    rows = table()
    assert rows, f"{MIGRATING} lists no deliberate difference"


def test_every_row_is_named_by_a_test() -> None:
    unused = sorted(set(table()) - set(referenced_ids()))
    assert not unused, (
        f"rows of the table in {MIGRATING} that no conformance test names: {unused}; a listed "
        "difference must be shown by a test, or removed"
    )


def test_every_id_passed_to_listed_is_in_the_table() -> None:
    # listed() fails at run time too; this also covers a test that is skipped or deselected.
    for path in sorted(HERE.glob("test_*.py")):
        for difference_id in re.findall(r'listed\("([^"]+)"\)', path.read_text()):
            if difference_id != "no-such-difference":
                assert difference_id in table(), f"{path.name}: {difference_id!r} is not listed"


def test_an_unlisted_difference_fails() -> None:
    with pytest.raises(AssertionError, match="does not list"):
        listed("no-such-difference")


def test_a_malformed_table_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.conformance.differences as differences

    page = tmp_path / "migrating.md"
    page.write_text(
        "## Deliberate differences\n\n| id | what differs | why |\n|---|---|---|\n"
        "| `a-b` | x | y |\n| `a-b` | x | y |\n"
    )
    monkeypatch.setattr(differences, "MIGRATING", page)
    differences.table.cache_clear()
    try:
        with pytest.raises(TableError, match="listed twice"):
            differences.table()
    finally:
        differences.table.cache_clear()
