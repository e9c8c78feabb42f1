"""The entry-point cache: a listing after any install, upgrade or uninstall matches a fresh scan.

Every listing runs in a fresh interpreter with its own ``XDG_CACHE_HOME``; the truth it is
compared with is the same listing with ``ACCELKW_NO_CACHE=1``.
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

import pytest

from accelkw_core.discovery.cache import EntryPointInfo, cache_dir, stamp_of
from tests.conftest import good_plugin, run_accelkw, run_python, write_dist

# Loads the registry and reports what it found and whether the scan ran (cache.scan called).
PROBE = """
    import json, sys
    from accelkw_core.discovery import cache
    scans, scan = [], cache.scan
    cache.scan = lambda group: scans.append(group) or scan(group)
    from accelkw_core.discovery.registry import Registry
    records = Registry().plugins()
    print(json.dumps({
        "scanned": bool(scans),
        "plugins": [[r.name, r.distribution, r.version, r.status, r.entry_point] for r in records],
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
    assert first["scanned"] is True
    assert list((cache / "accelkw").glob("entry-points-*.json"))
    second = probe(site, cache)
    assert second["scanned"] is False
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


def test_no_cache_switch_writes_nothing_and_scans(site: Path, cache: Path) -> None:
    gizmo(site)
    for _ in range(2):
        assert probe(site, cache, ACCELKW_NO_CACHE="1")["scanned"] is True
    assert not cache.exists()


def test_a_corrupt_cache_file_is_ignored_and_replaced(site: Path, cache: Path) -> None:
    gizmo(site)
    probe(site, cache)
    (path,) = (cache / "accelkw").glob("entry-points-*.json")
    path.write_text('{"format": 1, "stamp": [1, 2')
    assert probe(site, cache)["plugins"] == truth(site, cache)
    assert probe(site, cache)["scanned"] is False


def test_an_unwritable_cache_folder_still_lists(site: Path, cache: Path) -> None:
    gizmo(site)
    cache.write_text("a file where the cache folder would go")
    for _ in range(2):
        found = probe(site, cache)
        assert found["scanned"] is True
        assert "gizmo" in names(found)


def test_cache_dir_honours_xdg_and_the_switch(tmp_path: Path) -> None:
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "accelkw")
    home = os.path.join(os.path.expanduser("~"), ".cache", "accelkw")
    assert cache_dir({"XDG_CACHE_HOME": "relative/ignored"}) == home
    assert cache_dir({}) == home
    assert cache_dir({"ACCELKW_NO_CACHE": "1", "XDG_CACHE_HOME": str(tmp_path)}) is None


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


def test_entry_point_info_loads_like_importlib_metadata() -> None:
    assert EntryPointInfo("j", "os.path:join", None, None).load() is os.path.join
    assert EntryPointInfo("m", "os.path", None, None).load() is os.path
    assert EntryPointInfo("x", "os : path.join [extra]", None, None).load() is os.path.join
    with pytest.raises(ValueError, match="invalid entry point value"):
        EntryPointInfo("bad", "not a-valid:value!", None, None).load()


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
    # The throwaway venv sees accelkw-core and its dependencies without installing them.
    core_root = Path(accelkw_core.__file__).resolve().parent.parent
    deps = Path(pluggy.__file__).resolve().parent.parent
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
