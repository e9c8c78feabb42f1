"""Write the generated reference text into the committed Markdown, between its markers.

Run ``python docs/refsync.py`` after changing a handler's fields, an extension point, a hook or
the CLI; ``python docs/refsync.py --check`` says which pages are stale without writing
(``tests/test_docs.py`` fails on a stale page the same way). The pages keep what was
generated, so they read right on GitHub, in a diff, and in a site built without the plugins.

A block is an opening marker on a line of its own, the generated text, and a closing marker::

    <!-- fields: autocast -->

    | Field | Type | Default | Description |
    ...

    <!-- /fields -->

The opening markers are the ones ``docs/hooks.py`` lists (``fields``, ``handler``,
``docstring``, ``handlers``, ``cli``, ``hooks``, ``points``, ``capabilities``, ``trackers``,
``environment``, ``flags``); on a page under ``ar/`` every table has Arabic headings and
notes, an Arabic ``fields`` marker carries ``field: description`` lines after the handler name,
an Arabic ``hooks`` marker ``hook: description`` and ``hook.param: description`` lines, and
an Arabic ``cli`` marker ``command: help``, ``command.description: text`` and
``command --option: help`` lines, an Arabic ``environment`` marker ``VAR.accelerate: text`` and
``VAR.accelkw: text`` lines, an Arabic ``flags`` marker ``--flag: text`` lines (the row's
first flag), and an Arabic ``points`` marker ``point.ranks: text``, ``point.contribution: text``
and ``point.used: text`` lines. A marker with no closing one yet gets
one. With only some built-ins installed, a block about one that is not installed keeps its
committed text, and a table over all built-ins lists the installed ones with a note naming the
others; :func:`sync` reports both, and the staleness test compares only the rest.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import refgen  # docs/refgen.py, next to this file (a script's folder is on sys.path)

__all__ = ["KINDS", "Block", "blocks", "expand", "main", "page_lang", "pages", "sync"]

KINDS = frozenset(
    {
        "fields",
        "handler",
        "docstring",
        "handlers",
        "cli",
        "hooks",
        "points",
        "capabilities",
        "trackers",
        "environment",
        "flags",
    }
)
PER_HANDLER = frozenset({"fields", "handler", "docstring"})
# Tables over every built-in: with some not installed they carry a note, so they are compared
# only when every built-in is installed.
ALL_BUILTINS = frozenset({"handlers", "points", "capabilities", "environment"})
OPEN = re.compile(r"^<!--\s*([a-z]+)\s*(?::\s*(.*?))?\s*-->[ \t]*$", re.S | re.M)
DOCS = Path(__file__).resolve().parent
TRANSLATED = ("ar",)


class MarkerError(refgen.DocsError):
    """A page's markers cannot be read (an unknown kind, a block that is not closed)."""


@dataclass(frozen=True)
class Block:
    """One marker block of a page: ``start``/``end`` delimit its generated text."""

    kind: str
    arg: str
    start: int  # just after the opening marker's line
    end: int  # where the closing marker starts (== start when there is none yet)
    closed: bool

    @property
    def name(self) -> str:
        """The handler name of a per-handler marker (its argument's first line)."""
        lines = self.arg.splitlines()
        return lines[0].strip() if lines else ""


def _close(kind: str) -> str:
    return f"<!-- /{kind} -->"


def blocks(text: str, where: str = "") -> Iterator[Block]:
    """The marker blocks of ``text``, in order; an ordinary comment is not one."""
    for match in OPEN.finditer(text):
        kind, arg = match.group(1), match.group(2)
        if kind not in KINDS:
            if arg is None:
                continue  # an ordinary comment
            raise MarkerError(
                f"{where}: unknown marker <!-- {kind}: ... -->; known: {', '.join(sorted(KINDS))}"
            )
        start = match.end() + 1 if text[match.end() : match.end() + 1] == "\n" else match.end()
        following = OPEN.search(text, start)
        limit = following.start() if following is not None else len(text)
        close = text.find(_close(kind), start, limit)
        if close == -1:
            yield Block(kind, arg or "", start, start, closed=False)
        else:
            yield Block(kind, arg or "", start, close, closed=True)


def page_lang(rel: str) -> str:
    """The language of a page by its path under ``docs/``: ``ar/...`` is Arabic."""
    first = rel.split("/", 1)[0]
    return first if first in TRANSLATED else "en"


def _translations(lines: list[str], where: str) -> dict[str, str]:
    out = {}
    for line in lines:
        if not line.strip():
            continue
        field, sep, text = line.partition(":")
        if not sep or not text.strip():
            raise MarkerError(f"{where}: expected 'field: description', got {line.strip()!r}")
        out[field.strip()] = text.strip()
    return out


def expand(block: Block, rel: str) -> str:
    """The generated text of ``block`` on page ``rel`` (a path under ``docs/``).

    Raises :class:`refgen.NotInstalled` for a per-handler block whose built-in is not
    installed, :class:`refgen.DocsError` for any other problem.
    """
    lang = page_lang(rel)
    kind, name = block.kind, block.name
    if kind in PER_HANDLER and not name:
        raise MarkerError(f"{rel}: <!-- {kind}: NAME --> needs a handler name")
    if kind == "fields":
        return refgen.fields_table(name, lang, _translations(block.arg.splitlines()[1:], rel))
    if kind == "handler":
        return refgen.handler_summary(name, lang)
    if kind == "docstring":
        return refgen.handler_docstring(name)
    if kind == "handlers":
        in_folder = rel.rsplit("/", 1)[0].endswith("handlers")
        return refgen.handlers_overview(lang, "" if in_folder else "handlers/")
    if kind == "cli":
        return refgen.cli_reference(lang, _translations(block.arg.splitlines(), rel))
    if kind == "points":
        return refgen.points_table(lang, docs=_translations(block.arg.splitlines(), rel))
    if kind == "capabilities":
        return refgen.capabilities_table(lang)
    if kind == "trackers":
        return refgen.trackers_table(lang)
    if kind == "environment":
        return refgen.accelerate_env_table(lang, _translations(block.arg.splitlines(), rel))
    if kind == "flags":
        return refgen.launch_flags_table(lang, _translations(block.arg.splitlines(), rel))
    return refgen.hook_reference(lang, _translations(block.arg.splitlines(), rel))


def comparable(block: Block) -> bool:
    """Whether ``block`` can be generated exactly as committed with what is installed."""
    missing = refgen.missing_builtins()
    if block.kind in PER_HANDLER:
        return block.name not in missing
    if block.kind == "trackers":
        return refgen.trackers_installed()
    return not (block.kind in ALL_BUILTINS and missing)


def sync(text: str, rel: str) -> tuple[str, list[str]]:
    """``text`` with every block regenerated; and the blocks kept or noted as they are because
    a built-in is not installed (``"fields: fsdp"``)."""
    out: list[str] = []
    kept: list[str] = []
    pos = 0
    for block in blocks(text, rel):
        try:
            generated = "\n" + expand(block, rel).strip("\n") + "\n\n"
        except refgen.NotInstalled:
            kept.append(f"{block.kind}: {block.name}")
            if block.closed:
                continue  # the committed text stays
            generated = "\n"
        if not comparable(block):
            kept.append(block.kind)
        out.append(text[pos : block.start])
        out.append(generated)
        if not block.closed:
            out.append(_close(block.kind) + "\n")
        pos = block.end
    out.append(text[pos:])
    return "".join(out), kept


def pages(root: Path = DOCS) -> list[Path]:
    """Every Markdown page under ``root``."""
    return sorted(root.rglob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale pages, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path in pages():
        rel = path.relative_to(DOCS).as_posix()
        text = path.read_text(encoding="utf-8")
        new, kept = sync(text, rel)
        for what in kept:
            print(f"{rel}: {what}: a built-in is not installed, kept or noted", file=sys.stderr)
        if new != text:
            stale.append(rel)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "stale" if args.check else "updated"
    for rel in stale:
        print(f"{verb}: docs/{rel}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
