"""MkDocs hooks: check the reference blocks, and finish each language's site.

The site is built once per language by the i18n plugin (see mkdocs.yml): English from ``docs/``,
Arabic from ``docs/ar/`` at the same paths. These hooks

- check the reference blocks that ``docs/refsync.py`` writes into the committed pages between
  their markers (a block never closed, or never filled, stops the build: run
  ``python docs/refsync.py``); ``tests/test_docs.py`` fails when a block is stale;
- put ``lang`` and ``dir`` on ``<html>`` (the theme puts ``dir`` only on ``<body>``);
- mark a page that has no translation yet (the plugin falls back to the English file): its
  navigation title says so, a note in the site's language opens it, and its English text keeps
  ``lang="en" dir="ltr"`` inside the right-to-left page. Every page is translated, and
  ``tests/test_docs_arabic.py`` fails on one that is not; the mark is what a reader of a local
  build sees of an English page added before its translation;
- make the language switch links relative, so the site works under any path;
- drop the ``<!-- translated-from: ... -->`` first line of a translation (``docs/ar_sync.py``),
  so the page's heading is its first element again and gives the page its title.

Markers (HTML comments, so a page shows nothing of them), each closed by ``<!-- /KIND -->``:

- ``<!-- fields: NAME -->``: the field table of built-in handler ``NAME``. On a page under
  ``ar/`` the headings are Arabic, and ``field: text`` lines after the name (inside the same
  comment) give Arabic descriptions. Every table has Arabic headings and notes there.
- ``<!-- handler: NAME -->``: class, import line, distribution and ordering of ``NAME``.
- ``<!-- docstring: NAME -->``: the class docstring of ``NAME``, as Markdown.
- ``<!-- handlers -->``: the table of the built-in handlers, with links to their pages.
- ``<!-- cli -->``: every command and option of ``accelkw``, from its argparse parser; on a
  page under ``ar/``, ``<!-- cli:`` followed by ``command: text``, ``command.description: text``
  and ``command --option: text`` lines gives the Arabic help texts.
- ``<!-- hooks -->``: every hook specification, from its signature and docstring; on a page
  under ``ar/``, ``<!-- hooks:`` followed by ``hook: text`` and ``hook.param: text`` lines gives
  the Arabic descriptions.
- ``<!-- points -->``: every extension point of ``accelkw_core.contract.points.POINTS``, with
  the built-ins whose plans contribute to it (found by planning them, see ``refgen``).
- ``<!-- capabilities -->``: every capability a built-in's plan provides, with the built-ins.
- ``<!-- trackers -->``: the built-in trackers, read from their installed plugins.
- ``<!-- environment -->``: Accelerate's environment variables and what accelkw does with each
  (the core's table and the installed built-ins' ``accelerate_env``).
- ``<!-- flags -->``: ``accelerate launch``'s flags and what ``accelkw launch`` does with each.

On a page under ``ar/``, the ``environment`` and ``flags`` markers take Arabic texts for the
cells the code writes, like ``hooks`` (``<!-- environment:`` then ``VAR.accelerate: text`` and
``VAR.accelkw: text`` lines; ``<!-- flags:`` then ``--flag: text`` lines; ``<!-- points:`` then
``point.ranks: text``, ``point.contribution: text`` and ``point.used: text`` lines).

The build imports no plugin: what it publishes is what is committed.
"""

from __future__ import annotations

import re
from typing import Any

import refgen  # docs/refgen.py: MkDocs puts this folder on sys.path while loading hooks
import refsync  # docs/refsync.py, likewise
from mkdocs.exceptions import PluginError

DEFAULT_LANG = "en"
RTL_LANGS = {"ar"}

# Shown on a page that the site's language has no translation of yet: (title, text). Its keys
# are the translated languages, each with its pages in docs/<language>/.
UNTRANSLATED = {
    "ar": (
        "لم تُترجم هذه الصفحة بعد",
        "هذه الصفحة غير متاحة بالعربية حتى الآن، لذا يُعرض نصها الإنجليزي أدناه.",
    ),
}


def _lang(page: Any) -> str:
    """The language of the page's source: ``docs/ar/...`` is Arabic, anything else English."""
    first = page.file.src_uri.split("/", 1)[0]
    return first if first in UNTRANSLATED else DEFAULT_LANG


def _site_lang(config: Any) -> str:
    """The language of the site being built (the i18n plugin sets the theme's per build)."""
    return str(config.theme.get("language") or DEFAULT_LANG)


def _is_fallback(page: Any, config: Any) -> bool:
    return _lang(page) != _site_lang(config)


TRANSLATED_FROM = re.compile(r"\A<!-- translated-from: [0-9a-f]{64} -->\n")


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Refuse a page with a reference block that was never closed or never filled; drop a
    translation's record of its English source."""
    markdown = TRANSLATED_FROM.sub("", markdown, count=1)
    try:
        for block in refsync.blocks(markdown, page.file.src_uri):
            if not block.closed or not markdown[block.start : block.end].strip():
                raise PluginError(
                    f"{page.file.src_uri}: the <!-- {block.kind} --> block is "
                    f"{'not closed' if not block.closed else 'empty'}; run "
                    "python docs/refsync.py to write it"
                )
    except refgen.DocsError as exc:
        raise PluginError(str(exc)) from exc
    return markdown


def on_page_content(html: str, page: Any, config: Any, **kwargs: Any) -> str:
    """A page shown in English on another language's site says so, in that language."""
    if not _is_fallback(page, config):
        return html
    site = _site_lang(config)
    if site not in UNTRANSLATED:
        raise PluginError(
            f"{page.file.src_uri}: no 'untranslated page' note for language {site!r}; "
            f"add one to UNTRANSLATED in docs/hooks.py (known: {', '.join(sorted(UNTRANSLATED))})"
        )
    title, text = UNTRANSLATED[site]
    page.title = f"{page.title} {refgen.LABELS[site]['untranslated'].strip()}"
    note = (
        '<div class="admonition note untranslated">'
        f'<p class="admonition-title">{title}</p><p>{text}</p></div>'
    )
    return f'{note}\n<div lang="{DEFAULT_LANG}" dir="ltr">\n{html}\n</div>'


def on_page_context(context: Any, page: Any, config: Any, **kwargs: Any) -> Any:
    """Language switch links relative to the site root, like every other link of the site.

    The i18n plugin points each entry at the same page in the other language, except on the
    home pages, where it keeps the language's root-absolute link (``/ar/``), which would break a
    site served below a path.
    """
    # Attribute access, as the plugin writes it and the theme's template reads it.
    for alternate in getattr(config.extra, "alternate", None) or []:
        if alternate["link"].startswith("/"):
            alternate["link"] = alternate["link"].lstrip("/") or "./"
    return context


def on_post_page(output: str, page: Any, config: Any, **kwargs: Any) -> str:
    """``<html lang dir>`` for the site's language: right to left is set on the root element."""
    lang = _site_lang(config)
    direction = "rtl" if lang in RTL_LANGS else "ltr"
    html, n = re.subn(
        r'<html lang="[^"]*"', f'<html lang="{lang}" dir="{direction}"', output, count=1
    )
    if not n:
        raise PluginError(
            f"{page.file.src_uri}: cannot set the page direction (the theme's <html lang> "
            "attribute was not found)"
        )
    return html
