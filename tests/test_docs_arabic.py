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


FIELDS = """# Handler

<!-- fields: autocast -->

| Field | Type | Default | Description |
|---|---|---|---|
| `enabled` | `bool` | `True` | Whether autocasting is on. |

<!-- /fields -->
"""


def test_a_changed_field_description_makes_the_translation_stale_a_changed_default_not(
    tmp_path: Path,
) -> None:
    arabic = (
        "# المعالج\n\n<!-- fields: autocast\nenabled: هل التحويل مفعّل.\n-->\n\n<!-- /fields -->\n"
    )
    docs = write_pair(tmp_path, FIELDS, arabic)
    assert ar_sync().problems("page.md", docs) == []
    (docs / "page.md").write_text(FIELDS.replace("`True`", "`False`"), encoding="utf-8")
    assert ar_sync().problems("page.md", docs) == []
    (docs / "page.md").write_text(FIELDS.replace("is on.", "is off."), encoding="utf-8")
    (found,) = ar_sync().problems("page.md", docs)
    assert "changed since docs/ar/page.md was translated" in found


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


def test_translations_in_markers_name_only_what_exists() -> None:
    """A translation in an Arabic marker that outlives its command, option or hook fails the
    build; one that is missing shows the English text, marked, which the page check refuses."""
    refgen = importlib.import_module("refgen")  # docs/ is on sys.path through ar_sync()
    ar_sync()
    with pytest.raises(refgen.DocsError, match="accelkw plan --jsn"):
        refgen.cli_reference("ar", {"accelkw plan --jsn": "اطبع JSON."})
    with pytest.raises(refgen.DocsError, match="accelkw_no_such_hook"):
        refgen.hook_reference("ar", {"accelkw_no_such_hook": "وصف"})
    cli = refgen.cli_reference("ar", {"accelkw plan --json": "اطبع JSON."})
    assert "| `--json` | اطبع JSON. |" in cli
    assert "| `--json` | (بالإنجليزية) Print JSON. |" in cli  # another command's, not translated
    hooks = refgen.hook_reference("ar", {"accelkw_env_info": "أضف أسطرًا."})
    assert "\nأضف أسطرًا.\n" in hooks and "**المعاملات**" in hooks
    env = refgen.accelerate_env_table("ar", {"ACCELERATE_USE_CPU.accelkw": "كل عملية على CPU."})
    assert "| مُعتمَد | كل عملية على CPU. |" in env and "| (بالإنجليزية) true: run" in env
    with pytest.raises(refgen.DocsError, match=r"ACCELERATE_USE_GPU\.accelkw"):
        refgen.accelerate_env_table("ar", {"ACCELERATE_USE_GPU.accelkw": "نص"})
    points = refgen.points_table("ar", docs={"teardown.used": "تُشغَّل مرة واحدة."})
    assert "| تُشغَّل مرة واحدة. |" in points and "| (بالإنجليزية) every rank, once |" in points
    with pytest.raises(refgen.DocsError, match=r"teardown\.usd"):
        refgen.points_table("ar", docs={"teardown.usd": "نص"})
    flags = refgen.launch_flags_table("ar", {"--cpu": "كل عملية على CPU."})
    assert "| `--cpu` | مُعتمَد | كل عملية على CPU. |" in flags
    with pytest.raises(refgen.DocsError, match="--cpux"):
        refgen.launch_flags_table("ar", {"--cpux": "نص"})


def test_the_arabic_page_carries_every_generated_block_and_a_fresh_import_table(
    tmp_path: Path,
) -> None:
    names = (
        "<!-- BEGIN accelerate-names: generated by `python docs/refgen.py --write-names` -->\n"
        "| Accelerate | accelkw | ملاحظة |\n|---|---|---|\n<!-- END accelerate-names -->\n"
    )
    without_table = ARABIC.replace("<!-- trackers -->", "<!-- other -->").replace(
        "<!-- /trackers -->", ""
    )
    docs = write_pair(tmp_path, ENGLISH + names, without_table + names)
    found = "\n".join(ar_sync().problems("page.md", docs))
    assert "lacks the generated blocks of its English page: <!-- trackers -->" in found
    assert "import table is stale: run python docs/refgen.py --write-names" in found
    # Written by the generator, the Arabic import table is fresh: headed in Arabic, the names it
    # lists are the English page's, and its notes are the ones its opening marker translates.
    refgen = importlib.import_module("refgen")
    from accelkw_core.tools.porting import NAMES

    notes = "".join(f"{refgen.names_key(n.accelerate, n.name)}: ملاحظة\n" for n in NAMES if n.note)
    marked = names.replace(" -->\n|", "\n" + notes + "-->\n|", 1)
    fresh = refgen.with_names_table(ARABIC + marked, "ar")
    docs = write_pair(tmp_path / "fresh", ENGLISH + names, fresh)
    assert ar_sync().problems("page.md", docs) == []
    assert "| Accelerate | accelkw | ملاحظة |" in fresh
    assert fresh.count("| `from accelerate") == refgen.accelerate_names_table().count(
        "| `from accelerate"
    )


POINTS = """# Points

<!-- points -->

| Point | Cardinality | Role | Runs on | A contribution is | How the runtime uses it | Built-ins | Examples |
|---|---|---|---|---|---|---|---|
| `loss` | `many` | `shared` | every rank | a callable `f(x) -> x | None` | applied in order | [`ddp`](handlers/ddp.md) | — |

<!-- /points -->
"""


@pytest.mark.parametrize(
    ("old", "new", "stale"),
    [
        ("(handlers/ddp.md) | —", "(handlers/ddp.md) | `ema`", False),  # a new contributor
        ("every rank", "every rank, once", True),
        ("`f(x) -> x | None`", "`f(x) -> x | int`", True),  # a | inside a code span
        ("applied in order", "applied in reverse", True),
    ],
)
def test_a_changed_point_text_makes_the_translation_stale_a_new_contributor_not(
    tmp_path: Path, old: str, new: str, stale: bool
) -> None:
    arabic = "# النقاط\n\n<!-- points:\nloss.ranks: كل رتبة\n-->\n\n<!-- /points -->\n"
    docs = write_pair(tmp_path, POINTS, arabic)
    assert ar_sync().problems("page.md", docs) == []
    (docs / "page.md").write_text(POINTS.replace(old, new), encoding="utf-8")
    found = ar_sync().problems("page.md", docs)
    assert bool(found) == stale and all("changed since docs/ar/page.md" in p for p in found)
