"""The documentation site builds with no warnings, and its generated references are complete.

The site is built once per module with ``mkdocs build --strict`` (the same command CI runs);
the tests then read the HTML. The hook-docstring checks read the source directly, so they run
even where mkdocs is not installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import posixpath
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelkw_core.cli.main import build_parser
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery import hookspecs
from accelkw_core.discovery.catalog import HANDLER_DISTRIBUTIONS, REFERENCE_NAMES
from tests.conftest import REPO

MKDOCS = Path(sys.executable).parent / "mkdocs"
LANGS = {"en": "", "ar": "ar/"}
FIELD_HEADER = {"en": "<th>Field</th>", "ar": "<th>الحقل</th>"}


def hook_specs() -> list[tuple[str, Callable[..., Any]]]:
    marker = f"{hookspecs.PROJECT}_spec"
    return [
        (name, fn)
        for name, fn in vars(hookspecs).items()
        if callable(fn) and getattr(fn, marker, None) is not None
    ]


def builtin_handlers() -> dict[str, type[KwargsHandler]]:
    """Registry name -> class of every built-in of the catalog, imported from its plugin package."""
    out = {}
    for class_name, (module, _) in REFERENCE_NAMES.items():
        cls = getattr(importlib.import_module(module), class_name)
        if isinstance(cls, type) and issubclass(cls, KwargsHandler):
            out[cls.name] = cls
    assert set(out) == set(HANDLER_DISTRIBUTIONS)
    return out


def commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    def walk(prefix: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, Any]]:
        yield prefix, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(f"{prefix} {name}", sub)

    return walk("accelkw", build_parser())


@functools.cache
def load_refgen() -> ModuleType:
    """``docs/refgen.py``, the generator the MkDocs hook uses (docs/ is not a package)."""
    name = "accelkw_docs_refgen"
    spec = importlib.util.spec_from_file_location(name, REPO / "docs" / "refgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@functools.cache
def load_refsync() -> ModuleType:
    """``docs/refsync.py``, which writes the reference blocks into the pages; it imports
    ``refgen`` from its own folder, as when run as a script."""
    docs = str(REPO / "docs")
    if docs not in sys.path:
        sys.path.append(docs)
    return importlib.import_module("refsync")


def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` into ``out``, as CI runs it (no banner-silencing variable)."""
    if not MKDOCS.exists():
        pytest.skip(
            f"mkdocs is not installed next to {sys.executable} (pip install -r requirements-dev.txt)"
        )
    env = {k: v for k, v in os.environ.items() if k != "NO_MKDOCS_2_WARNING"}
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-6000:]}"
    assert "WARNING" not in proc.stderr, proc.stderr[-6000:]
    return proc


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("site")
    return out, build_site(out).stderr


@pytest.fixture(scope="module")
def site(build: tuple[Path, str]) -> Path:
    return build[0]


def page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text(encoding="utf-8")


def text_of(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


# -- the build -----------------------------------------------------------------------------


def test_site_builds_offline_with_every_page(site: Path) -> None:
    for path in ("", "quickstart", "migrating", "configuration", "cli", "hooks", "discovery"):
        assert (site / path / "index.html").is_file(), path
    for path in ("plugin-tutorial", "extension-points", "benchmarks", "reliability", "ar"):
        assert (site / path / "index.html").is_file(), path
    html = page(site, "")
    assert "fonts.googleapis.com" not in html and "fonts.gstatic.com" not in html
    assert not list(site.rglob("*.py")), "generator scripts must not be published"


def test_every_hook_spec_is_in_the_hooks_page(site: Path) -> None:
    html = page(site, "hooks")
    specs = hook_specs()
    assert specs
    for name, fn in specs:
        heading = re.search(rf'<h2 id="{name}">(.*?)</h2>', html, flags=re.S)
        assert heading is not None, f"hook {name} has no section in the hook reference"
        section = html[heading.end() :].split("<h2 ", 1)[0]
        for param in inspect.signature(fn).parameters:
            assert f"<code>{param}</code>" in section, (name, param)
        assert "Example" in section and "@hookimpl" in text_of(section)


@pytest.mark.parametrize("lang", sorted(LANGS))
@pytest.mark.parametrize("name", sorted(HANDLER_DISTRIBUTIONS))
def test_every_handler_field_is_in_its_generated_table(site: Path, name: str, lang: str) -> None:
    cls = builtin_handlers()[name]
    html = page(site, f"{LANGS[lang]}handlers/{name}")
    header = FIELD_HEADER[lang]
    tables = [t for t in re.findall(r"<table>.*?</table>", html, flags=re.S) if header in t]
    assert len(tables) == 1, f"{lang} page of {name}: expected one generated field table"
    cells = re.findall(r"<tr>\s*<td><code>(\w+)</code></td>", tables[0])
    assert cells == [f.name for f in dataclasses.fields(cls) if f.init], (lang, name)


@pytest.mark.parametrize("lang", sorted(LANGS))
def test_every_extension_point_is_in_the_generated_table(site: Path, lang: str) -> None:
    from accelkw_core.contract.points import POINTS

    html = page(site, f"{LANGS[lang]}extension-points")
    tables = [
        t
        for t in re.findall(r"<table>.*?</table>", html, flags=re.S)
        if re.search(r"<td><code>around_step</code></td>\s*<td><code>many</code>", t)
    ]
    assert len(tables) == 1, f"{lang}: expected one generated table of the extension points"
    rows = re.findall(r"<tr>\s*<td><code>(\w+)</code></td>\s*<td><code>(\w+)</code>", tables[0])
    assert rows == [(p.name, p.cardinality) for p in POINTS.values()], lang


def test_the_build_prints_no_theme_banner(build: tuple[Path, str]) -> None:
    """No end-of-life or MkDocs 2.0 notice, without any variable set (requirements-dev.txt)."""
    stderr = build[1]
    for phrase in ("end of life", "Zensical", "MkDocs 2.0", "NO_MKDOCS_2_WARNING"):
        assert phrase not in stderr, stderr[:3000]


def nav_links(html: str) -> list[tuple[str, str]]:
    """(href, title) of every page link in the primary navigation (not the page's own TOC)."""
    start = html.index("md-nav--primary")
    nav = html[start : html.index("md-sidebar--secondary", start)]
    links = re.findall(
        r'<a href="([^"#][^"]*)"[^>]*class="md-nav__link[^"]*"[^>]*>(.*?)</a>', nav, re.S
    )
    return [(href, " ".join(text_of(title).split())) for href, title in links]


def switch_links(html: str) -> dict[str, str]:
    """hreflang -> href of the language switch in the header."""
    return dict(
        (lang, href)
        for href, lang in re.findall(
            r'<a href="([^"]*)" hreflang="([a-z]+)" class="md-select__link"', html
        )
    )


def site_path(source: Path) -> str:
    """Where the page ``docs/X.md`` is published: ``X`` (``handlers`` for handlers/index.md)."""
    rel = source.relative_to(REPO / "docs").with_suffix("").as_posix()
    return "" if rel == "index" else rel.removesuffix("/index")


# Every English page, by its path in the site; its Arabic page is at ar/ + the same path.
SITE_PAGES = tuple(
    site_path(p) for p in sorted((REPO / "docs").rglob("*.md")) if "ar" not in p.parts
)
ARABIC_PAGES = tuple(f"ar/{p}".rstrip("/") for p in SITE_PAGES)
UNTRANSLATED_MARK = "(بالإنجليزية)"


def test_each_language_is_its_own_site_with_direction_on_html(site: Path) -> None:
    for path in ARABIC_PAGES:
        html = page(site, path)
        assert '<html lang="ar" dir="rtl"' in html, path
        assert 'placeholder="بحث"' in html, f"{path}: the theme's strings are not Arabic"
    for path in SITE_PAGES:
        html = page(site, path)
        assert '<html lang="en" dir="ltr"' in html, path
        assert 'placeholder="Search"' in html, path


@pytest.mark.parametrize(("english", "arabic"), list(zip(SITE_PAGES, ARABIC_PAGES, strict=True)))
def test_the_language_switch_lands_on_the_same_page(site: Path, english: str, arabic: str) -> None:
    def target(path: str, href: str) -> str:
        resolved = posixpath.normpath(posixpath.join(path, href))
        return "" if resolved == "." else resolved

    en, ar = switch_links(page(site, english)), switch_links(page(site, arabic))
    assert set(en) == set(ar) == {"en", "ar"}
    assert target(english, en["ar"]) == arabic and target(english, en["en"]) == english
    assert target(arabic, ar["en"]) == english and target(arabic, ar["ar"]) == arabic
    for href in (*en.values(), *ar.values()):
        assert not href.startswith("/"), "switch links must be relative (site served below a path)"


def test_the_arabic_navigation_lists_arabic_pages_and_marks_english_ones(site: Path) -> None:
    links = nav_links(page(site, "ar/quickstart"))
    english_links = nav_links(page(site, "quickstart"))
    assert len(links) == len(english_links) > 10
    for href, title in links:
        target = posixpath.normpath(posixpath.join("ar/quickstart", href))
        assert target == "ar" or target.startswith("ar/"), f"{title}: {href} leaves the Arabic site"
        source = REPO / "docs" / (target + ".md")
        translated = source.is_file() or (REPO / "docs" / target / "index.md").is_file()
        assert translated != title.endswith(UNTRANSLATED_MARK), (title, href)
        if not re.fullmatch(r"\w+Kwargs", title.removesuffix(UNTRANSLATED_MARK).strip()):
            assert re.search(r"[\u0600-\u06ff]", title), (
                f"nav title {title!r} is not Arabic: give its English title an Arabic one under "
                "nav_translations of the 'ar' language in mkdocs.yml"
            )
    assert all(UNTRANSLATED_MARK not in title for _, title in english_links)


def test_an_untranslated_page_says_so_in_arabic_and_keeps_its_english_left_to_right() -> None:
    """What the Arabic site shows of an English page added before its translation (every page
    is translated today, so the hook is called as MkDocs calls it, on such a page)."""
    from types import SimpleNamespace

    if str(REPO / "docs") not in sys.path:
        sys.path.append(str(REPO / "docs"))
    hooks = importlib.import_module("hooks")
    page = SimpleNamespace(file=SimpleNamespace(src_uri="new-page.md"), title="New page")
    config = SimpleNamespace(theme={"language": "ar"})
    html = hooks.on_page_content('<h1 id="new-page">New page</h1>', page=page, config=config)
    assert page.title == "New page (بالإنجليزية)"
    note = html.index('class="admonition note untranslated"')
    body = html.index('<div lang="en" dir="ltr">')
    assert note < body < html.index('<h1 id="new-page">')
    # A translated page, and any page of the English site, is left as it is.
    arabic = SimpleNamespace(file=SimpleNamespace(src_uri="ar/new-page.md"), title="صفحة")
    assert hooks.on_page_content("<p>x</p>", page=arabic, config=config) == "<p>x</p>"
    english = SimpleNamespace(theme={"language": "en"})
    assert hooks.on_page_content("<p>x</p>", page=page, config=english) == "<p>x</p>"


def test_every_cli_command_and_option_is_in_the_cli_page(site: Path) -> None:
    html = page(site, "cli")
    # accelerate launch's flags that --help leaves out are each in the migration page's table.
    flags = page(site, "migrating")
    refgen = load_refgen()
    for command, parser in commands():
        heading = re.search(rf'<h\d id="{refgen.cli_anchor(command)}"><code>{command}</code>', html)
        assert heading is not None, f"{command!r} is missing from the CLI reference"
        section = html[heading.end() :].split("<h", 1)[0]
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    if action.help == argparse.SUPPRESS:  # listed by its long name
                        assert max(action.option_strings, key=len) in flags, (command, option)
                    else:
                        assert option in section, (command, option)


def test_readme_links_the_docs() -> None:
    readme = (REPO / "README.md").read_text()
    intro = readme.split("## Set up", 1)[0]
    assert "docs/" in intro and "mkdocs serve" in intro


# -- hook documentation (no mkdocs needed) ------------------------------------------------


@pytest.mark.parametrize("name", [name for name, _ in hook_specs()])
def test_every_hook_is_documented(name: str) -> None:
    fn = getattr(hookspecs, name)
    doc = inspect.getdoc(fn)
    assert doc, f"hook {name} has no docstring"
    assert doc.splitlines()[0].strip(), f"hook {name}: the docstring must start with a summary"
    for param in inspect.signature(fn).parameters:
        assert re.search(rf"^:param {param}: \S", doc, flags=re.M), (
            f"hook {name}: document parameter {param!r} with ':param {param}: ...'"
        )
    example = re.search(r"Example::\n\n((?:    .*\n?|\n)+)", doc)
    assert example and example.group(1).strip(), f"hook {name}: add an 'Example::' block"


def test_the_generator_refuses_an_undocumented_hook() -> None:
    refgen = load_refgen()

    def accelkw_half_documented(state: object, extra: int) -> None:
        """Does something.

        :param state: documented.
        """

    with pytest.raises(refgen.DocsError, match=r"extra.*Example"):
        refgen._parse_hook("accelkw_half_documented", accelkw_half_documented, {})
    assert [hook.name for hook in refgen.hook_docs()] == [name for name, _ in hook_specs()]


def test_a_missing_plugin_is_named_with_its_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refgen = load_refgen()
    monkeypatch.setitem(HANDLER_DISTRIBUTIONS, "nothere", "accelkw-nothere")
    monkeypatch.setitem(REFERENCE_NAMES, "NotHereKwargs", ("accelkw_nothere", "accelkw-nothere"))
    with pytest.raises(refgen.DocsError, match=r"accelkw-nothere.*pip install -e plugins/nothere"):
        refgen.fields_table("nothere")


def test_a_translation_of_a_field_that_does_not_exist_fails() -> None:
    refgen = load_refgen()
    with pytest.raises(refgen.DocsError, match="enabeld"):
        refgen.fields_table("autocast", "ar", {"enabeld": "نص"})


NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
ARABIC_NUMBERS = {
    "الخمسة": 5, "الستة": 6, "السبعة": 7, "الثمانية": 8, "التسعة": 9, "العشرة": 10,
}  # fmt: skip
# "the eight built-ins", "five built-in handler plugins", "8 built-in handlers", ...
BUILTIN_COUNT = re.compile(
    rf"\b({'|'.join(NUMBER_WORDS)}|\d+)\s+built-?ins?\b", flags=re.IGNORECASE
)
ARABIC_BUILTIN_COUNT = re.compile(rf"المعالجات(?:\s+المدمجة)?\s+({'|'.join(ARABIC_NUMBERS)})")


def test_every_count_of_built_ins_in_the_docs_is_the_catalogs() -> None:
    """A page that says how many built-ins there are says what the catalog holds (most pages
    name no number, so adding a built-in changes nothing there)."""
    from accelkw_core.discovery.catalog import BUILTINS

    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    wrong = []
    for page in pages:
        text = " ".join(page.read_text(encoding="utf-8").split())
        for match in BUILTIN_COUNT.finditer(text):
            word = match.group(1).lower()
            count = int(word) if word.isdigit() else NUMBER_WORDS[word]
            if count != len(BUILTINS):
                wrong.append(f"{page.relative_to(REPO)}: {match.group(0)!r}")
        for match in ARABIC_BUILTIN_COUNT.finditer(text):
            if ARABIC_NUMBERS[match.group(1)] != len(BUILTINS):
                wrong.append(f"{page.relative_to(REPO)}: {match.group(0)!r}")
    assert not wrong, f"the catalog has {len(BUILTINS)} built-ins; the docs say: {wrong}"


# -- the reference blocks committed in the pages ----------------------------------------------


def test_every_reference_block_in_the_pages_is_fresh() -> None:
    """What ``python docs/refsync.py`` would write is what is committed, for every block the
    installed built-ins can generate (a block about one that is not installed is left out)."""
    refsync = load_refsync()
    stale, seen = [], 0
    for path in refsync.pages():
        rel = path.relative_to(REPO / "docs").as_posix()
        text = path.read_text(encoding="utf-8")
        for block in refsync.blocks(text, rel):
            assert block.closed, f"docs/{rel}: <!-- {block.kind} --> is not closed"
            if not refsync.comparable(block):
                continue
            seen += 1
            committed = text[block.start : block.end].strip("\n")
            if committed != refsync.expand(block, rel).strip("\n"):
                stale.append(f"docs/{rel}: <!-- {block.kind}: {block.name} -->")
    assert seen, "no reference block was compared"
    assert not stale, f"stale reference blocks (run python docs/refsync.py): {stale}"


def test_a_changed_table_is_found_stale_and_rewritten() -> None:
    refsync = load_refsync()
    text = "# Page\n\n<!-- fields: autocast -->\n\n| old |\n\n<!-- /fields -->\n\nafter\n"
    new, kept = refsync.sync(text, "handlers/autocast.md")
    assert kept == [] and new != text
    assert "| `enabled` | `bool` | `True` |" in new and "| old |" not in new
    assert new.endswith("<!-- /fields -->\n\nafter\n")
    assert refsync.sync(new, "handlers/autocast.md") == (new, [])  # idempotent
    opened = refsync.sync("<!-- cli -->\ntext after\n", "cli.md")[0]  # a block not closed yet
    assert opened.startswith("<!-- cli -->\n\n## `accelkw`")
    assert opened.endswith("\n\n<!-- /cli -->\ntext after\n")
    with pytest.raises(refsync.MarkerError, match="unknown marker <!-- feilds"):
        list(refsync.blocks("<!-- feilds: autocast -->\n", "x.md"))


def test_the_generator_works_with_a_built_in_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in that cannot be imported: its own blocks keep their committed text, the tables
    over every built-in list the others with a note naming it, and those tables are not
    compared."""
    refsync = load_refsync()
    refgen = refsync.refgen
    monkeypatch.setattr(refgen, "BUILTIN_HANDLERS", (*refgen.BUILTIN_HANDLERS, "nothere"))
    monkeypatch.setitem(HANDLER_DISTRIBUTIONS, "nothere", "accelkw-nothere")
    monkeypatch.setitem(REFERENCE_NAMES, "NotHereKwargs", ("accelkw_nothere", "accelkw-nothere"))
    assert refgen.missing_builtins() == ("nothere",)
    overview = refgen.handlers_overview("en").splitlines()
    assert overview[-1] == (
        "| *Not installed when this table was generated, so not shown:* "
        "`nothere` (`accelkw-nothere`) | | | |"
    )
    assert any(line.startswith("| [`autocast`]") for line in overview)
    assert "`nothere`" in refgen.points_table("ar").splitlines()[-1]
    assert "`nothere`" in refgen.capabilities_table("en").splitlines()[-1]
    page = (
        "<!-- fields: nothere -->\n\nCOMMITTED\n\n<!-- /fields -->\n"
        "<!-- handlers -->\n\n<!-- /handlers -->\n"
    )
    new, kept = refsync.sync(page, "handlers/index.md")
    assert kept == ["fields: nothere", "handlers"]
    assert "\n\nCOMMITTED\n\n" in new and "| *Not installed" in new
    blocks = list(refsync.blocks(new, "handlers/index.md"))
    assert [refsync.comparable(b) for b in blocks] == [False, False]
