"""A warm ``accelkw plugins list`` answers from the kept listing and imports no plugin module.

Every listing runs in a fresh interpreter with its own ``XDG_CACHE_HOME``. A plugin here leaves
a mark file when imported, so a test can tell whether a listing imported it; what any listing
prints is compared with ``--refresh`` (a real load).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import good_plugin, run_accelkw, write_dist

TRIPWIRE = """
    import pathlib
    pathlib.Path({mark!r}).write_text("imported")
"""


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "xdg-cache"


@pytest.fixture
def mark(tmp_path: Path) -> Path:
    return tmp_path / "imported"


def gadget(site: Path, mark: Path, extra: str = "", requires_dep: bool = False) -> None:
    """acme-gadget, whose module leaves ``mark`` when imported (and imports acme_dep if asked)."""
    head = textwrap.dedent(TRIPWIRE.format(mark=str(mark)))
    if requires_dep:
        head += "import acme_dep\n"
    write_dist(
        site,
        "acme-gadget",
        {"gadget": "acme_gadget"},
        {"acme_gadget.py": head + textwrap.dedent(good_plugin("gadget")) + extra},
        requires=["acme-dep"] if requires_dep else (),
    )


def listing(site: Path, cache: Path, *args: str, **env: str) -> tuple[int, list[Any], str]:
    result = run_accelkw(
        ["plugins", "list", "--json", *args], site=site, env={"XDG_CACHE_HOME": str(cache), **env}
    )
    return result.returncode, result.json(), result.stderr


def mine(plugins: list[Any], drop_timing: bool = True) -> dict[str, Any]:
    out = {}
    for p in plugins:
        if p["distribution"] and p["distribution"].startswith("acme-"):
            out[p["name"]] = {k: v for k, v in p.items() if not (drop_timing and k == "load_ms")}
    return out


def test_a_warm_listing_imports_no_plugin_and_prints_the_same(
    site: Path, cache: Path, mark: Path
) -> None:
    gadget(site, mark)
    _, first, _ = listing(site, cache)
    assert mark.exists()
    mark.unlink()
    _, warm, _ = listing(site, cache)
    assert not mark.exists(), "a warm listing imported the plugin"
    assert mine(warm, drop_timing=False) == mine(first, drop_timing=False)
    assert mine(warm)["gadget"]["handlers"][0]["fields"][0]["name"] == "level"
    table = run_accelkw(["plugins", "list"], site=site, env={"XDG_CACHE_HOME": str(cache)})
    assert not mark.exists()
    assert "GadgetKwargs" in table.stdout and "acme-gadget" in table.stdout
    _, refreshed, _ = listing(site, cache, "--refresh")
    assert mark.exists(), "--refresh did not load the plugin"
    assert mine(refreshed) == mine(warm)


def test_a_removed_dependency_is_caught_because_every_distribution_is_in_the_key(
    site: Path, cache: Path, mark: Path
) -> None:
    write_dist(site, "acme-dep", {}, {"acme_dep.py": "VALUE = 1\n"})
    gadget(site, mark, requires_dep=True)
    _, before, _ = listing(site, cache)
    assert mine(before)["gadget"]["status"] == "loaded"
    _, warm, _ = listing(site, cache)
    assert mine(warm)["gadget"]["status"] == "loaded"
    # `pip uninstall acme-dep`: its module and its dist-info go; the plugin's own files stay.
    (site / "acme_dep.py").unlink()
    shutil.rmtree(site / "acme_dep-1.0.0.dist-info")
    code, after, stderr = listing(site, cache, "--strict")
    gadget_now = mine(after)["gadget"]
    assert gadget_now["status"] == "failed"
    assert gadget_now["error"]["type"] == "ModuleNotFoundError"
    assert "acme_dep" in gadget_now["error"]["message"]
    assert code == 1 and "plugin 'gadget' failed" in stderr
    # Kept as failed (with its reason and the --strict status) until something changes...
    mark.unlink()
    code, again, stderr = listing(site, cache, "--strict")
    assert not mark.exists()
    assert mine(again) == mine(after) and code == 1 and "plugin 'gadget' failed" in stderr
    # ...such as the dependency coming back.
    write_dist(site, "acme-dep", {}, {"acme_dep.py": "VALUE = 1\n"})
    _, back, _ = listing(site, cache)
    assert mark.exists() and mine(back)["gadget"]["status"] == "loaded"


def test_editing_a_plugin_source_in_place_is_seen(site: Path, cache: Path, mark: Path) -> None:
    gadget(site, mark)
    listing(site, cache)
    _, warm, _ = listing(site, cache)
    assert [f["name"] for f in mine(warm)["gadget"]["handlers"][0]["fields"]] == ["level"]
    # An editable install: the source changes, no dist-info does.
    source = site / "acme_gadget.py"
    text = source.read_text().replace(
        'level: int = handler_field(1, doc="how much", ge=0)',
        'level: int = handler_field(1, doc="how much", ge=0)\n'
        '    depth: int = handler_field(2, doc="how deep", ge=0)',
    )
    source.write_text(text + "\n# edited\n")
    _, edited, _ = listing(site, cache)
    assert [f["name"] for f in mine(edited)["gadget"]["handlers"][0]["fields"]] == [
        "level",
        "depth",
    ]


def test_the_deny_list_is_part_of_the_key(site: Path, cache: Path, mark: Path) -> None:
    gadget(site, mark)
    listing(site, cache)
    listing(site, cache)
    _, denied, _ = listing(site, cache, ACCELKW_DISABLE_PLUGINS="gadget")
    assert mine(denied)["gadget"]["status"] == "disabled"
    _, again, _ = listing(site, cache)
    assert mine(again)["gadget"]["status"] == "loaded"


def test_an_unknown_name_in_the_allow_list_still_warns_from_the_kept_listing(
    site: Path, cache: Path, mark: Path
) -> None:
    gadget(site, mark)
    env = {"ACCELKW_PLUGINS": "gadget,gadgett"}
    first = listing(site, cache, "--strict", **env)
    mark.unlink()
    warm = listing(site, cache, "--strict", **env)
    assert not mark.exists()
    assert first[0] == warm[0] == 1
    assert "gadgett" in first[2] and first[2] == warm[2]


def test_no_cache_stores_nothing(site: Path, cache: Path, mark: Path) -> None:
    gadget(site, mark)
    listing(site, cache, ACCELKW_NO_CACHE="1")
    assert not list(cache.glob("accelkw/listing-*.json"))
    listing(site, cache)
    (kept,) = cache.glob("accelkw/listing-*.json")
    assert "gadget" in json.dumps(json.loads(kept.read_text())["listing"])


def test_a_table_listing_keeps_no_fields_so_json_loads_once_for_them(
    site: Path, cache: Path, mark: Path
) -> None:
    gadget(site, mark)
    env = {"XDG_CACHE_HOME": str(cache)}
    run_accelkw(["plugins", "list"], site=site, env=env)
    mark.unlink()
    assert "GadgetKwargs" in run_accelkw(["plugins", "list"], site=site, env=env).stdout
    assert not mark.exists()
    _, first, _ = listing(site, cache)
    assert mark.exists(), "--json answered without the fields a table listing leaves out"
    assert mine(first)["gadget"]["handlers"][0]["fields"][0]["name"] == "level"
    mark.unlink()
    _, warm, _ = listing(site, cache)
    assert not mark.exists() and mine(warm) == mine(first)
