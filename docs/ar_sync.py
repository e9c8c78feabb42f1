"""Keep the Arabic pages in step with the English ones they translate.

Every English page ``docs/X.md`` has its translation at ``docs/ar/X.md``, whose first line
records the English text it was translated from::

    <!-- translated-from: <sha256 of the English source> -->

The hash covers the English page without the generated text of its reference blocks (the
tables ``docs/refsync.py`` writes, which it writes in Arabic into the Arabic page too), so
regenerating a table does not make a translation stale; what the Arabic page translates counts:
a handler docstring block (translated by hand), the field, hook and command descriptions and
the environment and flag tables' texts (translated in the Arabic block's marker), and the notes
of migrating.md's import table (translated in its opening marker), so changing a field's
description or a name's note makes its Arabic page stale, changing a default or adding a name
without a note does not.

``python docs/ar_sync.py`` lists every page that is out of step (missing, never recorded, or
whose English changed since) and exits 1 if any; ``--report`` adds a table of every page's word
and code-block counts; after translating or updating a page, ``python docs/ar_sync.py --update
docs/ar/X.md`` records the hash of the English page as it is now. ``tests/test_docs_arabic.py``
fails on every problem :func:`problems` finds.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import refgen  # docs/refgen.py, next to this file (a script's folder is on sys.path)
import refsync  # docs/refsync.py, likewise

__all__ = [
    "HEADER",
    "Counts",
    "counts",
    "english_links",
    "english_pages",
    "main",
    "problems",
    "record",
    "recorded_hash",
    "source_hash",
    "with_hash",
]

DOCS = Path(__file__).resolve().parent
LANG = "ar"
AR = DOCS / LANG
HEADER = re.compile(r"\A<!-- translated-from: ([0-9a-f]{64}) -->\n")
# Blocks whose text the Arabic page translates by hand rather than regenerates.
TRANSLATED_BY_HAND = frozenset({"docstring"})
# Blocks regenerated on the Arabic page from translations kept in its marker: the English texts
# those translate (field descriptions, hook descriptions, command help) count, the rest does not.
TRANSLATED_IN_MARKER = frozenset({"fields", "hooks", "cli", "environment", "flags", "points"})
# The columns of the points table a translation translates (where it runs, what a contribution
# is, how it is used), by position; the contributors are names.
POINT_TEXTS = {3: "ranks", 4: "contribution", 5: "used"}
# The import table of migrating.md (docs/refgen.py --write-names), generated like the others.
# (A translation's opening marker spans lines: it carries the notes' translations.)
NAMES_TABLE = re.compile(
    r"(<!-- BEGIN accelerate-names.*?-->\n)(.*?)(<!-- END accelerate-names)", re.S
)
NAMES_ROW = re.compile(r"^\| `from ([\w.]+) import (\w+)` \| .*? \| (.*?) \|$", re.M)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
HEADING = re.compile(r"^#{1,6}[ \t]+\S")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ARABIC_LETTER = re.compile(r"[\u0621-\u064a\u0671-\u06d3\u06fa-\u06ff]")
LATIN_LETTER = re.compile(r"[A-Za-z]")
# A translation's prose is at least this share of its English page's word count, and this share
# of its letters (outside code) is Arabic script.
MIN_WORD_RATIO = 0.6
MIN_ARABIC_SHARE = 0.5
UNTRANSLATED_MARK = "(بالإنجليزية)"  # what refgen puts before a text with no translation


def english_pages(docs: Path = DOCS) -> list[str]:
    """Every English page, as a path under ``docs/``."""
    return sorted(
        p.relative_to(docs).as_posix()
        for p in docs.rglob("*.md")
        if p.relative_to(docs).parts[0] != LANG
    )


def _translated_in_marker(block: refsync.Block, text: str) -> str:
    """What a translation in the marker of ``block`` translates, from its English text: each
    field's name and description; each hook's or command's prose (code blocks left out)."""
    body = text[block.start : block.end]
    if block.kind in ("environment", "flags"):
        return body  # every cell but the names is translated
    if block.kind == "points":
        out = []
        for line in body.splitlines():
            cells = _cells(line)
            if len(cells) > max(POINT_TEXTS) and cells[0].startswith("`"):
                out += [
                    f"{cells[0].strip('`')}.{what}: {cells[i]}\n" for i, what in POINT_TEXTS.items()
                ]
        return "".join(out)
    if block.kind == "fields":
        rows = re.findall(r"^\| `(\w+)` \|.*\| (.*?) \|$", body, flags=re.M)
        return "".join(f"{name}: {doc}\n" for name, doc in rows)
    lines, _ = _lines_outside_code(body)
    return "\n".join(lines)


def _cells(row: str) -> list[str]:
    """The cells of a generated table row (``|`` separates cells only outside code spans: the
    generator escapes it elsewhere)."""
    if not row.startswith("|"):
        return []
    cells, current = [], ""
    for part in re.split(r"(`[^`]*`)", row.strip()[1:-1]):
        if part.startswith("`"):
            current += part
            continue
        pieces = part.split("|")
        current += pieces[0]
        for piece in pieces[1:]:
            cells.append(current.strip())
            current = piece
    cells.append(current.strip())
    return cells


def _without_generated(text: str, rel: str, hashed: bool = False) -> str:
    """``text`` with the generated text of its reference blocks removed (markers kept); with
    ``hashed``, the English texts that translations in markers translate are kept."""
    out, pos = [], 0
    for block in refsync.blocks(text, rel):
        if block.kind in TRANSLATED_BY_HAND:
            continue
        out.append(text[pos : block.start])
        if hashed and block.kind in TRANSLATED_IN_MARKER:
            out.append(_translated_in_marker(block, text))
        pos = block.end
    out.append(text[pos:])
    return NAMES_TABLE.sub(
        lambda m: m.group(1) + (_names_notes(m.group(2)) if hashed else "") + m.group(3),
        "".join(out),
    )


def _names_notes(table: str) -> str:
    """What a translation of the import table translates, from its English text: each noted
    row's key (``refgen.names_key``) and note."""
    return "".join(
        f"{refgen.names_key(module, name)}: {note}\n"
        for module, name, note in NAMES_ROW.findall(table)
        if note
    )


def source_hash(english: str, rel: str = "") -> str:
    """The hash a translation of the English page ``english`` records."""
    normal = _without_generated(english.replace("\r\n", "\n"), rel, hashed=True)
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()


def recorded_hash(arabic: str) -> str | None:
    """The hash an Arabic page's first line records, if it has one."""
    match = HEADER.match(arabic)
    return match.group(1) if match else None


def with_hash(arabic: str, digest: str) -> str:
    """``arabic`` with its first line recording ``digest``."""
    return f"<!-- translated-from: {digest} -->\n" + HEADER.sub("", arabic, count=1)


def _lines_outside_code(text: str) -> tuple[list[str], int]:
    """The lines of ``text`` outside fenced code blocks, and the number of those blocks."""
    lines, fences, fence = [], 0, ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence:
            closes = match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence)
            if closes and not line.strip().strip(fence[0]).strip():
                fence = ""
            continue
        if match:
            fence, fences = match.group(1), fences + 1
            continue
        lines.append(line)
    return lines, fences


@dataclass(frozen=True)
class Counts:
    """What a page is measured by."""

    words: int  # prose words: outside code blocks, comments and generated tables
    headings: int
    code_blocks: int
    arabic_share: float  # Arabic letters / (Arabic + Latin letters) in the prose, code spans out
    links: tuple[str, ...]  # every Markdown link target


def counts(text: str, rel: str = "") -> Counts:
    """Measure a page (its generated blocks count for headings and code blocks, not words)."""
    all_lines, code_blocks = _lines_outside_code(text)
    headings = sum(1 for line in all_lines if HEADING.match(line))
    prose_lines, _ = _lines_outside_code(_without_generated(text, rel))
    prose = re.sub(r"<!--.*?-->", " ", "\n".join(prose_lines), flags=re.S)
    prose = re.sub(r"\]\([^)]*\)", "]", prose)  # link targets are not words
    prose = re.sub(r"\{#[^}]*\}", " ", prose)  # heading ids
    words = sum(1 for token in prose.split() if re.search(r"\w", token))
    letters = re.sub(r"`[^`\n]*`", " ", prose)
    arabic = len(ARABIC_LETTER.findall(letters))
    latin = len(LATIN_LETTER.findall(letters))
    share = arabic / (arabic + latin) if arabic + latin else 0.0
    links = tuple(LINK.findall("\n".join(all_lines)))
    return Counts(words, headings, code_blocks, share, links)


def english_links(arabic: str, rel: str, docs: Path = DOCS) -> list[str]:
    """Links of the Arabic page ``ar/<rel>`` that lead out of ``docs/ar/`` to a page."""
    out = []
    root = (docs / LANG).resolve()
    here = (root / rel).parent
    for target in counts(arabic, f"{LANG}/{rel}").links:
        path = target.split("#", 1)[0]
        if not path or re.match(r"[a-z][a-z0-9+.-]*:", path) or not path.endswith(".md"):
            continue
        resolved = (here / path).resolve()
        if not resolved.is_relative_to(root):
            out.append(target)
    return out


def _generated(text: str, rel: str) -> set[tuple[str, str]]:
    """The generated blocks of a page, as (kind, handler name), the import table included;
    docstrings, which a translation writes by hand, left out."""
    found = {
        (block.kind, block.name if block.kind in refsync.PER_HANDLER else "")
        for block in refsync.blocks(text, rel)
        if block.kind not in TRANSLATED_BY_HAND
    }
    if NAMES_TABLE.search(text):
        found.add(("accelerate-names", ""))
    return found


def problems(rel: str, docs: Path = DOCS) -> list[str]:
    """Everything that keeps ``ar/<rel>`` from being a full, current translation of ``rel``."""
    english_path, arabic_path = docs / rel, docs / LANG / rel
    if not arabic_path.is_file():
        return [f"docs/{rel} has no Arabic page docs/{LANG}/{rel}"]
    english = english_path.read_text(encoding="utf-8")
    arabic = arabic_path.read_text(encoding="utf-8")
    found = []
    recorded = recorded_hash(arabic)
    if recorded is None:
        found.append(
            f"docs/{LANG}/{rel} records no English source: its first line must be "
            f"'<!-- translated-from: SHA256 -->' (python docs/ar_sync.py --update docs/{LANG}/{rel})"
        )
    elif recorded != source_hash(english, rel):
        found.append(
            f"docs/{rel} changed since docs/{LANG}/{rel} was translated from it: bring the "
            f"translation up to date, then python docs/ar_sync.py --update docs/{LANG}/{rel}"
        )
    en, ar = counts(english, rel), counts(arabic, f"{LANG}/{rel}")
    if ar.headings != en.headings:
        found.append(f"{ar.headings} headings, the English page has {en.headings}")
    if ar.code_blocks != en.code_blocks:
        found.append(f"{ar.code_blocks} code blocks, the English page has {en.code_blocks}")
    if ar.words < MIN_WORD_RATIO * en.words:
        found.append(
            f"{ar.words} words of prose, under {MIN_WORD_RATIO:.0%} of the English page's "
            f"{en.words}"
        )
    if ar.arabic_share < MIN_ARABIC_SHARE:
        found.append(f"only {ar.arabic_share:.0%} of its prose letters are Arabic script")
    for target in english_links(arabic, rel, docs):
        found.append(f"links to an English page: {target}")
    missing = _generated(english, rel) - _generated(arabic, f"{LANG}/{rel}")
    if missing:
        found.append(
            "lacks the generated blocks of its English page: "
            + ", ".join(
                sorted(f"<!-- {kind}{': ' + name if name else ''} -->" for kind, name in missing)
            )
        )
    if "BEGIN accelerate-names" in arabic and refgen.with_names_table(arabic, LANG) != arabic:
        found.append("its import table is stale: run python docs/refgen.py --write-names")
    if UNTRANSLATED_MARK in arabic:
        found.append(
            f"a generated table shows English text marked {UNTRANSLATED_MARK}: translate it in "
            "the block's marker (see docs/refsync.py)"
        )
    return [p if p.startswith("docs/") else f"docs/{LANG}/{rel}: {p}" for p in found]


def record(arabic_page: Path, docs: Path = DOCS) -> tuple[str, str]:
    """Record in ``arabic_page`` the hash of its English page as it is now.

    Returns the page's path under ``docs/ar/`` and the hash; :class:`ValueError` when the path is
    not an Arabic page or has no English page.
    """
    root = (docs / LANG).resolve()
    path = arabic_page.resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise ValueError(f"{arabic_page}: not an Arabic page under {root}")
    rel = path.relative_to(root).as_posix()
    english = docs / rel
    if not english.is_file():
        raise ValueError(f"{arabic_page}: there is no English page docs/{rel}")
    digest = source_hash(english.read_text(encoding="utf-8"), rel)
    path.write_text(with_hash(path.read_text(encoding="utf-8"), digest), encoding="utf-8")
    return rel, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--update",
        nargs="+",
        metavar="PAGE",
        help="record the current English source of these Arabic pages (docs/ar/X.md)",
    )
    parser.add_argument("--report", action="store_true", help="print every page's counts")
    args = parser.parse_args(argv)
    if args.update:
        for name in args.update:
            try:
                rel, digest = record(Path(name))
            except ValueError as exc:
                parser.error(str(exc))
            print(f"recorded: docs/{LANG}/{rel} translates docs/{rel} as of {digest[:12]}")
        return 0
    failing = 0
    if args.report:
        print("| page | English words | Arabic words | ratio | code blocks (en/ar) | headings |")
        print("|---|---|---|---|---|---|")
    for rel in english_pages():
        found = problems(rel)
        failing += bool(found)
        if args.report:
            en = counts((DOCS / rel).read_text(encoding="utf-8"), rel)
            arabic = DOCS / LANG / rel
            ar = (
                counts(arabic.read_text(encoding="utf-8"), f"{LANG}/{rel}")
                if arabic.is_file()
                else None
            )
            ratio = f"{ar.words / en.words:.0%}" if ar and en.words else "-"
            print(
                f"| {rel} | {en.words} | {ar.words if ar else '-'} | {ratio} | "
                f"{en.code_blocks}/{ar.code_blocks if ar else '-'} | "
                f"{en.headings}/{ar.headings if ar else '-'} |"
            )
        for problem in found:
            print(problem, file=sys.stderr)
    if failing:
        print(f"{failing} of {len(english_pages())} pages out of step", file=sys.stderr)
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
