"""The listing cache: a listing after any install, upgrade, uninstall or edit matches a real one,
and a listing when nothing changed imports no plugin module.

Every listing runs in a fresh interpreter with its own ``XDG_CACHE_HOME``; the truth it is
compared with is the same listing with ``ACCELKW_NO_CACHE=1`` (or ``--refresh``). A plugin here
may leave a mark file when imported, so a test can tell whether a listing imported it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from accelkw_core.discovery.listing_cache import cache_dir, stamp_of
from tests.conftest import good_plugin, run_accelkw, run_python, write_dist

# Lists as `accelkw plugins list --json` does, in-process, and reports what it printed and whether
# it loaded for real (found the entry points with importlib_metadata and imported the registry).
PROBE = """
    import contextlib, io, json, sys
    from accelkw_core.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["plugins", "list", "--json"])
    assert code == 0
    print(json.dumps({
        "scanned": "importlib_metadata" in sys.modules,
        "loaded": "accelkw_core.discovery.registry" in sys.modules,
        "plugins": [
            [p["name"], p["distribution"], p["version"], p["status"], p["entry_point"]]
            for p in json.loads(out.getvalue())
        ],
    }))
"""


def probe(site: Path, cache: Path, **env: str) -> dict:
    result = run_python(PROBE, site=site, env={"XDG_CACHE_HOME": str(cache), **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def truth(site: Path, cache: Path) -> list:
    return probe(site, cache, ACCELKW_NO_CACHE="1")["plugins"]


def names(found: dict) -> set[str]:
    return {row[0] for row in found["plugins"]}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "xdg-cache"


def gizmo(site: Path, version: str = "1.0.0", name: str = "gizmo") -> None:
    write_dist(
        site,
        f"acme-{name}",
        {name: f"acme_{name}"},
        {f"acme_{name}.py": good_plugin(name)},
        version,
    )


def test_second_listing_reads_the_cache_without_scanning(site: Path, cache: Path) -> None:
    gizmo(site)
    first = probe(site, cache)
    assert first["scanned"] is first["loaded"] is True
    assert list((cache / "accelkw").glob("listing-*.json"))
    second = probe(site, cache)
    assert second["scanned"] is second["loaded"] is False
    assert second["plugins"] == first["plugins"] == truth(site, cache)
    assert ["gizmo", "acme-gizmo", "1.0.0", "loaded", "acme_gizmo"] in second["plugins"]


def test_installing_a_distribution_between_listings_is_seen(site: Path, cache: Path) -> None:
    gizmo(site)
    assert "widget" not in names(probe(site, cache))
    gizmo(site, name="widget")
    after = probe(site, cache)
    assert after["scanned"] is True
    assert {"gizmo", "widget"} <= names(after)
    assert after["plugins"] == truth(site, cache)


def test_installing_into_a_folder_that_had_no_distributions_is_seen(
    site: Path, cache: Path
) -> None:
    # A folder without distributions is left out of the stamp; its first one must still count.
    assert "gizmo" not in names(probe(site, cache))
    assert probe(site, cache)["scanned"] is False
    gizmo(site)
    after = probe(site, cache)
    assert after["scanned"] is True
    assert "gizmo" in names(after)


def test_removing_a_distribution_between_listings_is_seen(site: Path, cache: Path) -> None:
    gizmo(site)
    gizmo(site, name="widget")
    assert "widget" in names(probe(site, cache))
    shutil.rmtree(site / "acme_widget-1.0.0.dist-info")
    after = probe(site, cache)
    assert "widget" not in names(after)
    assert after["plugins"] == truth(site, cache)


def test_upgrading_a_distribution_between_listings_is_seen(site: Path, cache: Path) -> None:
    gizmo(site, "1.0.0")
    probe(site, cache)
    shutil.rmtree(site / "acme_gizmo-1.0.0.dist-info")
    gizmo(site, "1.1.0")
    after = probe(site, cache)
    assert ["gizmo", "acme-gizmo", "1.1.0", "loaded", "acme_gizmo"] in after["plugins"]
    assert after["plugins"] == truth(site, cache)


def test_entry_points_edited_in_place_are_seen(site: Path, cache: Path) -> None:
    gizmo(site)
    (site / "acme_gizmo_v2.py").write_text((site / "acme_gizmo.py").read_text())
    probe(site, cache)
    eps = site / "acme_gizmo-1.0.0.dist-info" / "entry_points.txt"
    eps.write_text("[accelkw]\ngizmo = acme_gizmo_v2\n")
    after = probe(site, cache)
    assert ["gizmo", "acme-gizmo", "1.0.0", "loaded", "acme_gizmo_v2"] in after["plugins"]


def test_cached_listing_keeps_order_conflicts_and_failures(site: Path, cache: Path) -> None:
    write_dist(site, "first-dist", {"dup": "dup_one"}, {"dup_one.py": good_plugin("dup", "One")})
    write_dist(site, "second-dist", {"dup": "dup_two"}, {"dup_two.py": good_plugin("dup", "Two")})
    write_dist(site, "broken-dist", {"broken": "no_such_module_xyz"})
    env = {"XDG_CACHE_HOME": str(cache)}
    scanned = run_accelkw(["plugins", "list", "--json"], site=site, env=env)
    cached = run_accelkw(["plugins", "list", "--json"], site=site, env=env)
    assert scanned.returncode == cached.returncode == 0

    def comparable(result: object) -> list:
        return [{k: v for k, v in p.items() if k != "load_ms"} for p in result.json()]  # type: ignore[attr-defined]

    assert comparable(cached) == comparable(scanned)
    statuses = {(p["name"], p["distribution"]): p["status"] for p in scanned.json()}
    assert statuses[("broken", "broken-dist")] == "failed"
    assert {s for (n, _), s in statuses.items() if n.startswith("dup")} == {"conflict"}


def test_a_plugin_never_imported_does_not_stop_the_listing_being_kept(
    site: Path, cache: Path
) -> None:
    # Built for a core before 0.1 and denied: neither module is ever imported, so where (or
    # whether) it exists cannot change the listing until the stamp does.
    write_dist(site, "acme-stale", {"stale": "acme_stale_nowhere"}, requires=["accelkw-core<0.1"])
    write_dist(site, "acme-denied", {"denied": "acme_denied_nowhere"})
    first = probe(site, cache, ACCELKW_DISABLE_PLUGINS="denied")
    statuses = {row[0]: row[3] for row in first["plugins"]}
    assert statuses["stale"] == "incompatible" and statuses["denied"] == "disabled"
    again = probe(site, cache, ACCELKW_DISABLE_PLUGINS="denied")
    assert again["loaded"] is False and again["plugins"] == first["plugins"]
    # A plugin that is imported and whose module is nowhere keeps every listing real.
    after = probe(site, cache)
    assert after["loaded"] is True and probe(site, cache)["loaded"] is True


def test_no_cache_switch_writes_nothing_and_scans(site: Path, cache: Path) -> None:
    gizmo(site)
    for _ in range(2):
        assert probe(site, cache, ACCELKW_NO_CACHE="1")["scanned"] is True
    assert not cache.exists()


def test_a_corrupt_cache_file_is_ignored_and_replaced(site: Path, cache: Path) -> None:
    gizmo(site)
    probe(site, cache)
    (path,) = (cache / "accelkw").glob("listing-*.json")
    path.write_text('{"stamp": [3, 2')
    assert probe(site, cache)["plugins"] == truth(site, cache)
    assert probe(site, cache)["scanned"] is False


def test_an_unwritable_cache_folder_still_lists(site: Path, cache: Path) -> None:
    gizmo(site)
    cache.write_text("a file where the cache folder would go")
    for _ in range(2):
        found = probe(site, cache)
        assert found["scanned"] is True
        assert "gizmo" in names(found)


def test_cache_dir_honours_xdg_and_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # platformdirs names the folder from the process's environment.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir({}) == str(tmp_path / "accelkw")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir({}) == os.path.join(os.path.expanduser("~"), ".cache", "accelkw")
    assert cache_dir({"ACCELKW_NO_CACHE": "1"}) is None


def test_stamp_covers_egg_info_files_and_zip_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    egg_info = tmp_path / "site" / "old.egg-info"  # an old-style metadata *file*
    egg_info.parent.mkdir()
    egg_info.write_text("Metadata-Version: 1.0\nName: old\nVersion: 1\n")
    archive = tmp_path / "plugins.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))
    monkeypatch.setattr(sys, "path", [str(egg_info.parent), str(archive)])
    before = stamp_of("accelkw")
    egg_info.write_text("Metadata-Version: 1.0\nName: old\nVersion: 2.0\n")
    after_egg = stamp_of("accelkw")
    archive.write_bytes(b"PK\x05\x06" + bytes(18) + b"more")
    after_zip = stamp_of("accelkw")
    assert before != after_egg != after_zip


def test_a_custom_distribution_finder_turns_the_cache_off(monkeypatch: pytest.MonkeyPatch) -> None:
    class Finder:
        def find_distributions(self, context: object = None) -> list[object]:
            return []

    assert stamp_of("accelkw") is not None
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    assert stamp_of("accelkw") is None


def test_the_environment_is_part_of_the_stamp() -> None:
    assert stamp_of("accelkw", {}) == stamp_of("accelkw", {"PATH": "/bin"})
    assert stamp_of("accelkw", {}) != stamp_of("accelkw", {"ACCELKW_PLUGINS": "ddp"})


# -- the kept listing: no plugin imported, sources, dependencies and lists ------------------

TRIPWIRE = """
    import pathlib
    pathlib.Path({mark!r}).write_text("imported")
"""


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


# -- real pip install / upgrade / uninstall in a throwaway virtual environment ----------------

PLUGIN_MODULE = good_plugin("pipgizmo")


def build_wheel(folder: Path, version: str) -> Path:
    """A pure-Python wheel of ``accelkw-pipgizmo``, written by hand (no build backend needed)."""
    import base64
    import hashlib

    info = f"accelkw_pipgizmo-{version}.dist-info"
    files = {
        "accelkw_pipgizmo.py": textwrap.dedent(PLUGIN_MODULE),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: accelkw-pipgizmo\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: accelkw-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[accelkw]\npipgizmo = accelkw_pipgizmo\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"accelkw_pipgizmo-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def test_pip_install_upgrade_and_uninstall_between_listings(tmp_path: Path) -> None:
    import pluggy

    import accelkw_core

    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The throwaway venv sees accelkw-core and its dependencies without installing them; not the
    # installed plugins, whose editable modules it could not import (and a listing with an entry
    # point whose module is nowhere is never kept).
    core_root = Path(accelkw_core.__file__).resolve().parent.parent
    site_packages = Path(pluggy.__file__).resolve().parent.parent
    deps = tmp_path / "deps"
    deps.mkdir()
    for item in site_packages.iterdir():
        if not item.name.startswith(("accelkw", "__editable__")):
            (deps / item.name).symlink_to(item)
    Path(purelib, "accelkw_test_paths.pth").write_text(f"{core_root}\n{deps}\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "PYTHON", "PIP_"))}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")

    def pip(*args: str) -> None:
        cmd = [sys.executable, "-m", "pip", "--python", str(python), *args, "--no-index"]
        if args[0] == "uninstall":
            cmd.remove("--no-index")
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr

    def listing(**extra: str) -> dict:
        done = subprocess.run(
            [str(python), "-c", textwrap.dedent(PROBE)],
            capture_output=True,
            text=True,
            env={**env, **extra},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        if not extra:
            assert found["plugins"] == listing(ACCELKW_NO_CACHE="1")["plugins"]
        return found

    def pipgizmo(found: dict) -> list | None:
        return next((row for row in found["plugins"] if row[0] == "pipgizmo"), None)

    assert pipgizmo(listing()) is None
    assert listing()["scanned"] is False  # warm: nothing changed since the last listing

    pip("install", "--no-deps", str(build_wheel(tmp_path, "1.0.0")))
    assert pipgizmo(listing()) == [
        "pipgizmo",
        "accelkw-pipgizmo",
        "1.0.0",
        "loaded",
        "accelkw_pipgizmo",
    ]
    assert listing()["scanned"] is False

    pip("install", "--no-deps", str(build_wheel(tmp_path, "2.0.0")))
    assert pipgizmo(listing()) == [
        "pipgizmo",
        "accelkw-pipgizmo",
        "2.0.0",
        "loaded",
        "accelkw_pipgizmo",
    ]

    pip("uninstall", "--yes", "accelkw-pipgizmo")
    assert pipgizmo(listing()) is None
