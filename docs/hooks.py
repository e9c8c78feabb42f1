"""MkDocs hooks: fill the reference markers from the code and render Arabic pages right to left.

Markers (HTML comments, so an unprocessed page shows nothing wrong):

- ``<!-- fields: NAME -->``: the field table of built-in handler ``NAME``. On a page under
  ``ar/`` the headings are Arabic, and ``field: text`` lines after the name (inside the same
  comment) give Arabic descriptions.
- ``<!-- handler: NAME -->``: class, import line, distribution and ordering of ``NAME``.
- ``<!-- docstring: NAME -->``: the class docstring of ``NAME``, as Markdown.
- ``<!-- handlers -->``: the table of the built-in handlers, with links to their pages.
- ``<!-- cli -->``: every command and option of ``accelkw``, from its argparse parser.
- ``<!-- hooks -->``: every hook specification, from its signature and docstring.

Any problem (a plugin not installed, an undocumented hook or field, an unknown marker) stops
the build with a message that says what to fix: a page is never built with a hole in it.
"""

from __future__ import annotations

import re
from typing import Any

import refgen  # docs/refgen.py: MkDocs puts this folder on sys.path while loading hooks
from mkdocs.exceptions import PluginError

MARKER = re.compile(r"<!--\s*([a-z]+)\s*(?::\s*(.*?))?\s*-->", re.S)
KINDS = {"fields", "handler", "docstring", "handlers", "cli", "hooks"}
RTL_PREFIX = "ar/"


def _lang(page: Any) -> str:
    return "ar" if page.file.src_uri.startswith(RTL_PREFIX) else "en"


def _translations(lines: list[str], where: str) -> dict[str, str]:
    out = {}
    for line in lines:
        if not line.strip():
            continue
        field, sep, text = line.partition(":")
        if not sep or not text.strip():
            raise PluginError(f"{where}: expected 'field: description', got {line.strip()!r}")
        out[field.strip()] = text.strip()
    return out


def _expand(kind: str, arg: str, page: Any) -> str:
    lang = _lang(page)
    where = page.file.src_uri
    lines = arg.splitlines()
    name = lines[0].strip() if lines else ""
    if kind in ("fields", "handler", "docstring") and not name:
        raise PluginError(f"{where}: <!-- {kind}: NAME --> needs a handler name")
    if kind == "fields":
        return refgen.fields_table(name, lang, _translations(lines[1:], where))
    if kind == "handler":
        return refgen.handler_summary(name, lang)
    if kind == "docstring":
        return refgen.handler_docstring(name)
    if kind == "handlers":
        in_folder = page.file.src_uri.rsplit("/", 1)[0].endswith("handlers")
        return refgen.handlers_overview(lang, "" if in_folder else "handlers/")
    if kind == "cli":
        return refgen.cli_reference()
    return refgen.hook_reference()


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2) or ""
        if kind not in KINDS:
            if match.group(2) is None:
                return match.group(0)  # an ordinary comment
            raise PluginError(
                f"{page.file.src_uri}: unknown marker <!-- {kind}: ... -->; "
                f"known: {', '.join(sorted(KINDS))}"
            )
        try:
            return _expand(kind, arg, page)
        except refgen.DocsError as exc:
            raise PluginError(f"{page.file.src_uri}: {exc}") from exc

    return MARKER.sub(replace, markdown)


def on_post_page(output: str, page: Any, **kwargs: Any) -> str:
    """Pages under ``ar/`` are Arabic: ``lang="ar"`` and ``dir="rtl"`` for the whole page."""
    if _lang(page) != "ar":
        return output
    html, n_lang = re.subn(r'<html lang="[^"]*"', '<html lang="ar"', output, count=1)
    html, n_dir = re.subn(r'<body dir="ltr"', '<body dir="rtl"', html, count=1)
    if not (n_lang and n_dir):
        raise PluginError(
            f"{page.file.src_uri}: cannot switch the page to right-to-left (the theme's "
            "<html lang> or <body dir> attribute was not found)"
        )
    return html
