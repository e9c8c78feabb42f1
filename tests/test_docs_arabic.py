"""Every English page has a full, current Arabic translation under docs/ar/.

Checked per page by ``docs/ar_sync.py`` (``python docs/ar_sync.py`` prints the same problems):
the Arabic page exists, records the hash of the English text it was translated from and that
hash is the English page's now, has as many headings and code blocks, at least 60% of the
English prose's words, mostly in Arabic script, no link to an English page, and no generated
table text left untranslated. Reads the Markdown only: no build, so it runs in well under a
second.
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"


@functools.cache
def ar_sync() -> ModuleType:
    """``docs/ar_sync.py``, importing ``refsync`` from its folder as when run as a script."""
    if str(DOCS) not in sys.path:
        sys.path.append(str(DOCS))
    return importlib.import_module("ar_sync")


def english_pages() -> list[str]:
    return list(ar_sync().english_pages())


@pytest.mark.parametrize("rel", english_pages())
def test_the_arabic_page_is_a_full_current_translation(rel: str) -> None:
    found = ar_sync().problems(rel)
    assert not found, "\n".join(found)


def test_every_arabic_page_translates_an_english_page() -> None:
    english = set(english_pages())
    orphans = [
        p.relative_to(DOCS / "ar").as_posix()
        for p in (DOCS / "ar").rglob("*.md")
        if p.relative_to(DOCS / "ar").as_posix() not in english
    ]
    assert not orphans, f"Arabic pages with no English page: {orphans}"


ENGLISH = """# Title

Some words about [the handlers](handlers/index.md) and more words here.

<!-- trackers -->

| generated | table |

<!-- /trackers -->

```python
x = 1
```
"""

ARABIC = """# العنوان

كلمات عن [المعالجات](handlers/index.md) وكلمات أخرى هنا كثيرة جدا.

<!-- trackers -->

| جدول | مولَّد |

<!-- /trackers -->

```python
x = 1
```
"""


def write_pair(tmp_path: Path, english: str, arabic: str) -> Path:
    docs = tmp_path / "docs"
    (docs / "ar").mkdir(parents=True)
    (docs / "page.md").write_text(english, encoding="utf-8")
    digest = ar_sync().source_hash(english, "page.md")
    (docs / "ar" / "page.md").write_text(ar_sync().with_hash(arabic, digest), encoding="utf-8")
    return docs


def test_the_checker_passes_a_translation_and_ignores_regenerated_tables(tmp_path: Path) -> None:
    docs = write_pair(tmp_path, ENGLISH, ARABIC)
    assert ar_sync().problems("page.md", docs) == []
    # Regenerating a table (docs/refsync.py) does not make the translation stale.
    (docs / "page.md").write_text(ENGLISH.replace("| generated |", "| new |"), encoding="utf-8")
    assert ar_sync().problems("page.md", docs) == []


def test_the_checker_finds_a_changed_english_page(tmp_path: Path) -> None:
    docs = write_pair(tmp_path, ENGLISH, ARABIC)
    (docs / "page.md").write_text(ENGLISH.replace("more words", "other words"), encoding="utf-8")
    (found,) = ar_sync().problems("page.md", docs)
    assert "docs/page.md changed since docs/ar/page.md was translated" in found
    # The fix the message names (ar_sync.py --update) records the English page as it is now.
    assert ar_sync().record(docs / "ar" / "page.md", docs)[0] == "page.md"
    assert ar_sync().problems("page.md", docs) == []


def test_the_checker_finds_every_kind_of_shortfall(tmp_path: Path) -> None:
    short = "# العنوان\n\nكلمة [English](../page.md), some English.\n"
    docs = write_pair(tmp_path, ENGLISH + "\n## More\n", short)
    found = "\n".join(ar_sync().problems("page.md", docs))
    assert "1 headings, the English page has 2" in found
    assert "0 code blocks, the English page has 1" in found
    assert "words of prose, under 60%" in found
    assert "of its prose letters are Arabic script" in found
    assert "links to an English page: ../page.md" in found
    (docs / "ar" / "page.md").unlink()
    assert ar_sync().problems("page.md", docs) == [
        "docs/page.md has no Arabic page docs/ar/page.md"
    ]


def test_a_page_without_a_recorded_source_is_refused(tmp_path: Path) -> None:
    docs = write_pair(tmp_path, ENGLISH, ARABIC)
    (docs / "ar" / "page.md").write_text(ARABIC, encoding="utf-8")
    (found,) = ar_sync().problems("page.md", docs)
    assert "records no English source" in found and "--update docs/ar/page.md" in found


def test_recording_refuses_a_page_that_translates_nothing(tmp_path: Path) -> None:
    docs = write_pair(tmp_path, ENGLISH, ARABIC)
    (docs / "ar" / "other.md").write_text(ARABIC, encoding="utf-8")
    with pytest.raises(ValueError, match=r"there is no English page docs/other\.md"):
        ar_sync().record(docs / "ar" / "other.md", docs)
    with pytest.raises(ValueError, match="not an Arabic page"):
        ar_sync().record(docs / "page.md", docs)
