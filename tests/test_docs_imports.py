"""Every name a page of the docs imports from accelkw is there: ``from accelkw_core... import``
in the code blocks of the English pages (``docs/**/*.md`` but the translations), each name
imported for real, with no deprecation warning (a page teaches the current name)."""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.MULTILINE | re.DOTALL)
IMPORT = re.compile(
    r"^[ \t]*from[ \t]+accelkw_core[\w.]*[ \t]+import[ \t]+(\([^)]*\)|[^\n]+)", re.M
)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "ar" not in p.relative_to(DOCS).parts)


def imports_in(page: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for every name the page's code blocks import from accelkw_core."""
    found = []
    for block in FENCE.finditer(page.read_text(encoding="utf-8")):
        for match in IMPORT.finditer(block.group(2)):
            statement = ast.parse(match.group(0).strip()).body[0]
            assert isinstance(statement, ast.ImportFrom) and statement.module
            found += [(statement.module, alias.name) for alias in statement.names]
    return found


def test_the_pages_import_from_accelkw() -> None:
    # The check below runs on something: the pages teach imports, in several forms.
    found = {page.name: imports_in(page) for page in pages()}
    assert sum(map(len, found.values())) > 50, found
    assert ("accelkw_core.plugin", "KwargsHandler") in found["plugin-tutorial.md"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_name_a_page_imports_from_accelkw_is_there(page: Path) -> None:
    missing = []
    for module, name in imports_in(page):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            try:
                imported = importlib.import_module(module)
                if name != "*":
                    getattr(imported, name)
            except (ImportError, AttributeError, DeprecationWarning) as exc:
                missing.append(f"from {module} import {name}: {type(exc).__name__}: {exc}")
    assert not missing, f"{page.relative_to(REPO)}:\n" + "\n".join(missing)


def stable_modules() -> set[str]:
    """The modules docs/versioning.md lists as stable (its table's first column)."""
    text = (DOCS / "versioning.md").read_text(encoding="utf-8")
    section = text.split("## What a plugin may rely on", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `accelkw_core")]
    return {m for row in rows for m in re.findall(r"`(accelkw_core[\w.]*)`", row.split("|")[1])}


def test_the_pages_import_only_from_the_stable_modules() -> None:
    stable = stable_modules()
    assert {"accelkw_core", "accelkw_core.plugin", "accelkw_core.tracking"} <= stable
    outside = sorted(
        f"{page.relative_to(DOCS)}: from {module} import {name}"
        for page in pages()
        for module, name in imports_in(page)
        if module not in stable
    )
    assert not outside, "pages teach imports from modules versioning.md does not call stable:\n" + (
        "\n".join(outside)
    )
    for module in stable:  # and each stable module is one, with an __all__ of what it promises
        assert importlib.import_module(module).__all__, module
