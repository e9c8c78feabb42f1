"""The direct reading of ``*.dist-info`` folders finds what ``importlib_metadata`` finds.

``cache.scan`` reads entry points straight from the folders where the layout allows it (the
first listing after an install then skips importing ``importlib_metadata``) and falls back to
``importlib_metadata`` otherwise. Each case compares both in a fresh interpreter whose path
holds the ``tmp_path`` sites.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.conftest import good_plugin, run_python, write_dist

COMPARE = """
    import json
    import importlib_metadata
    from accelkw_core.discovery import cache
    fast = cache._scan_dist_infos("accelkw")
    try:
        truth = [
            [e.name, e.value, *cache._dist_identity(e.dist)]
            for e in importlib_metadata.entry_points(group="accelkw")
        ]
    except Exception as exc:  # importlib_metadata's own failure on a malformed file
        truth = f"failed: {exc!r}"
    rows = None if fast is None else [[e.name, e.value, e.distribution, e.version] for e in fast]
    # The installed built-ins are on the path too; the cases are about the acme ones.
    mine = lambda found: found if not isinstance(found, list) else [
        row for row in found if row[2].startswith("acme")
    ]
    print(json.dumps({"fast": mine(rows), "truth": mine(truth)}))
"""


def compare(*sites: Path) -> dict[str, Any]:
    path = os.pathsep.join(str(s) for s in sites)
    result = run_python(COMPARE, env={"PYTHONPATH": path})
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def plugin(site: Path, dist: str, name: str, version: str = "1.0.0") -> None:
    module = f"{dist.replace('-', '_').lower()}_{name}"
    write_dist(site, dist, {name: module}, {f"{module}.py": good_plugin(name)}, version)


def test_shadowing_and_order_follow_importlib_metadata(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    plugin(first, "acme-gizmo", "gizmo", "2.0.0")
    plugin(second, "acme-gizmo", "gizmo", "1.0.0")  # hidden by the one earlier on the path
    plugin(second, "acme-widget", "widget")
    plugin(first, "Acme_Gadget", "gadget")  # a name spelt differently is the same distribution
    plugin(second, "acme-gadget", "gadget_two")
    found = compare(first, second)
    assert found["fast"] is not None
    assert found["fast"] == found["truth"]
    assert ["gizmo", "acme_gizmo_gizmo", "acme-gizmo", "2.0.0"] in found["fast"]
    assert "gadget_two" not in {row[0] for row in found["fast"]}


def test_a_distribution_without_entry_points_still_hides_a_later_one(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    plugin(second, "acme-gizmo", "gizmo")
    info = first / "acme_gizmo-3.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-gizmo\nVersion: 3.0.0\n")
    found = compare(first, second)
    assert found["fast"] == found["truth"] == []


def test_an_egg_info_with_plugins_goes_through_importlib_metadata(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plugin(site, "acme-widget", "widget")
    egg = site / "acme_gizmo.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: acme-gizmo\nVersion: 1.0\n")
    (egg / "entry_points.txt").write_text("[accelkw]\ngizmo = acme_gizmo\n")
    assert compare(site)["fast"] is None
    # Without plugins of the group an egg-info only hides, which the direct reading follows.
    (egg / "entry_points.txt").write_text("[console_scripts]\ngizmo = acme_gizmo:main\n")
    found = compare(site)
    assert found["fast"] is not None and found["fast"] == found["truth"]


def test_a_malformed_entry_points_file_goes_through_importlib_metadata(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plugin(site, "acme-widget", "widget")
    (site / "acme_widget-1.0.0.dist-info" / "entry_points.txt").write_text("[accelkw]\nwidget\n")
    found = compare(site)
    assert found["fast"] is None and found["truth"].startswith("failed")


def test_comments_blank_lines_and_other_groups(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plugin(site, "acme-widget", "widget")
    (site / "acme_widget-1.0.0.dist-info" / "entry_points.txt").write_text(
        "# a comment\n[console_scripts]\nwidget = acme_widget:main\n\n"
        "[accelkw]\n  widget   =   acme_widget_widget  \n[other]\nx = y\n"
    )
    found = compare(site)
    assert found["fast"] == found["truth"]
    assert [row[:2] for row in found["fast"] or []][-1] == ["widget", "acme_widget_widget"]
