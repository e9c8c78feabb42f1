"""The built documentation site, as headless Chromium renders it.

The site is built with ``mkdocs build --strict`` (as in tests/test_docs.py), served over HTTP on
localhost, and loaded in Debian's ``chromium`` with ``--dump-dom``. A small probe script, added
to the pages of this test's own copy of the site, measures the laid-out page after the theme's
JavaScript has run and writes the result into the DOM as JSON, which the test then reads.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``; ``.ci/run`` installs it when it
runs as root). Browsers downloaded by pip packages do not run on these machines.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.test_docs import ARABIC_PAGES, SITE_PAGES, build_site

CHROMIUM = Path("/usr/bin/chromium")
UNTRANSLATED_MARK = "(بالإنجليزية)"
# Pages the probe is added to (paths in the site, without index.html).
PROBED = ("quickstart", "ar/quickstart", "ar/configuration", "configuration")
Probe = Callable[[str], dict[str, Any]]

# Runs once the page (and the theme's script) has loaded; measures what the reader sees.
PROBE = """
<script>
addEventListener("load", () => {
  const rect = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.right]; };
  const h1 = document.querySelector(".md-content h1");
  const range = document.createRange();
  range.selectNodeContents(h1.firstChild);
  const switchLinks = {};
  for (const a of document.querySelectorAll("a.md-select__link[hreflang]")) {
    switchLinks[a.hreflang] = new URL(a.href).pathname;
  }
  const nav = [];
  for (const a of document.querySelectorAll(".md-nav--primary a.md-nav__link")) {
    const url = new URL(a.href);
    if (!url.hash) nav.push([url.pathname, a.textContent.replace(/\\s+/g, " ").trim()]);
  }
  const result = {
    lang: document.documentElement.lang,
    dir: document.documentElement.dir,
    computedDirection: getComputedStyle(document.documentElement).direction,
    h1Box: rect(h1),
    h1Text: rect(range),
    content: rect(document.querySelector(".md-content")),
    navSidebar: rect(document.querySelector(".md-sidebar--primary")),
    searchPlaceholder: document.querySelector("input.md-search__input").placeholder,
    tocTitle: document.querySelector("label.md-nav__title[for=__toc]").textContent.trim(),
    // Each code block: its direction, and whether its text starts at the block's left edge.
    code: [...document.querySelectorAll(".md-content pre > code")].map((code) => {
      const text = document.createRange();
      text.selectNodeContents(code);
      return [getComputedStyle(code).direction, text.getClientRects()[0].left - rect(code)[0]];
    }),
    switchLinks,
    nav,
  };
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "layout-probe";
  out.textContent = JSON.stringify(result).replace(/</g, "\\\\u003c");
  document.body.append(out);
});
</script>
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The built site with the probe in PROBED pages, served on a free localhost port."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: the browser test needs Debian's chromium "
            "(apt-get install -y chromium; .ci/run installs it when run as root)"
        )
    site = tmp_path_factory.mktemp("site")
    build_site(site)
    for path in PROBED:
        page = site / path / "index.html"
        html = page.read_text(encoding="utf-8")
        assert html.count("</body>") == 1, path
        page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    pages = [url_path(p) for p in (*SITE_PAGES, *ARABIC_PAGES)]
    (site / "switch-probe.html").write_text(SWITCH_PROBE % json.dumps(pages), encoding="utf-8")
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


# Loaded as a page of the site: fetches every page of both languages, follows each page's
# language switch links as the browser resolves them, and fetches where they lead.
SWITCH_PROBE = """<!doctype html><html><body><script>
const PAGES = %s;
(async () => {
  const read = async (path) => {
    const response = await fetch(path);
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    return { status: response.status, doc };
  };
  const result = {};
  for (const path of PAGES) {
    const { status, doc } = await read(path);
    const base = new URL(path, location.href);
    const links = {};
    for (const a of doc.querySelectorAll("a.md-select__link[hreflang]")) {
      const target = new URL(a.getAttribute("href"), base);
      const landed = await read(target.pathname);
      links[a.getAttribute("hreflang")] = [
        target.pathname,
        landed.status,
        landed.doc.documentElement.lang,
        landed.doc.documentElement.dir,
      ];
    }
    result[path] = { status, lang: doc.documentElement.lang, links };
  }
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "switch-probe";
  out.textContent = JSON.stringify(result).replace(/</g, "\\\\u003c");
  document.body.append(out);
})();
</script></body></html>
"""


def url_path(path: str) -> str:
    """A site path (``ar/handlers/ddp``, ``""`` for the home page) as its URL path."""
    return f"/{path}/" if path else "/"


def render(url: str, profile: Path) -> str:
    """The DOM of ``url`` after load and the page's scripts, from headless Chromium."""
    profile.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1400,1000",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"chromium failed on {url}:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def probe(server: str, tmp_path_factory: pytest.TempPathFactory) -> Probe:
    """What the probe measured on page ``path`` (one of PROBED); each page is rendered once."""

    @functools.cache
    def measure(path: str) -> dict[str, Any]:
        assert path in PROBED, path
        dom = render(f"{server}/{path}/", tmp_path_factory.mktemp("profile"))
        found = re.search(r'<script type="application/json" id="layout-probe">(.*?)</script>', dom)
        assert found, f"/{path}/: the probe did not run (no load event?):\n{dom[-2000:]}"
        result: dict[str, Any] = json.loads(found.group(1))
        return result

    return measure


def test_the_arabic_quickstart_lays_out_right_to_left(probe: Probe) -> None:
    ar = probe("ar/quickstart")
    assert (ar["lang"], ar["dir"], ar["computedDirection"]) == ("ar", "rtl", "rtl")
    # The heading's text hugs the right edge of its box and leaves the left side empty.
    (box_left, box_right), (text_left, text_right) = ar["h1Box"], ar["h1Text"]
    assert abs(box_right - text_right) < 40 and text_left - box_left > 200, ar
    # The navigation column sits to the right of the content.
    assert ar["navSidebar"][0] > ar["content"][0], ar

    en = probe("quickstart")
    assert (en["lang"], en["dir"], en["computedDirection"]) == ("en", "ltr", "ltr")
    (box_left, box_right), (text_left, text_right) = en["h1Box"], en["h1Text"]
    assert abs(text_left - box_left) < 40 and box_right - text_right > 200, en
    assert en["navSidebar"][0] < en["content"][0], en


def test_the_theme_speaks_the_pages_language(probe: Probe) -> None:
    ar = probe("ar/quickstart")
    assert (ar["searchPlaceholder"], ar["tocTitle"]) == ("بحث", "جدول المحتويات")
    en = probe("quickstart")
    assert (en["searchPlaceholder"], en["tocTitle"]) == ("Search", "Table of contents")


def test_the_language_switch_lands_on_the_matching_page(
    probe: Probe, server: str, tmp_path: Path
) -> None:
    en = probe("quickstart")
    ar = probe("ar/quickstart")
    assert en["switchLinks"] == ar["switchLinks"] == {"en": "/quickstart/", "ar": "/ar/quickstart/"}
    # Following the link gives the Arabic quickstart itself, not the Arabic home page.
    dom = render(f"{server}{en['switchLinks']['ar']}", tmp_path / "follow")
    assert '<html lang="ar" dir="rtl"' in dom
    assert re.search(r'<h1 id="[^"]*">البدء السريع', dom), (
        "the switch did not land on the quickstart"
    )


def test_the_arabic_navigation_lists_only_arabic_pages(probe: Probe) -> None:
    nav = probe("ar/quickstart")["nav"]
    assert len(nav) > 10
    for path, title in nav:
        assert path.startswith("/ar/"), f"{title!r} ({path}) leaves the Arabic site"
        source = REPO / "docs" / path.strip("/")
        translated = source.with_suffix(".md").is_file() or (source / "index.md").is_file()
        assert translated != title.endswith(UNTRANSLATED_MARK), (path, title)
    english = probe("quickstart")["nav"]
    assert [p for p, _ in english] == [p.removeprefix("/ar") for p, _ in nav]


def test_code_reads_left_to_right_inside_arabic_pages(probe: Probe) -> None:
    for path in ("ar/quickstart", "ar/configuration", "configuration"):
        page = probe(path)
        assert page["computedDirection"] == ("rtl" if path.startswith("ar/") else "ltr"), path
        assert page["code"], f"{path}: no code block found"
        for direction, indent in page["code"]:
            # Left to right, the text starting at the block's left edge (its padding only).
            assert direction == "ltr" and 0 <= indent < 40, (path, page["code"])
    assert len(probe("ar/configuration")["code"]) == len(probe("configuration")["code"])


def test_every_page_opens_and_its_language_switch_leads_to_the_same_page(
    server: str, tmp_path: Path
) -> None:
    dom = render(f"{server}/switch-probe.html", tmp_path / "switch")
    found = re.search(r'<script type="application/json" id="switch-probe">(.*?)</script>', dom)
    assert found, f"the switch probe did not finish:\n{dom[-2000:]}"
    result = json.loads(found.group(1))
    for english, arabic in zip(SITE_PAGES, ARABIC_PAGES, strict=True):
        en, ar = url_path(english), url_path(arabic)
        assert (result[en]["status"], result[en]["lang"]) == (200, "en"), en
        assert (result[ar]["status"], result[ar]["lang"]) == (200, "ar"), ar
        for page in (en, ar):
            links = result[page]["links"]
            assert links["en"] == [en, 200, "en", "ltr"], (page, links)
            assert links["ar"] == [ar, 200, "ar", "rtl"], (page, links)
