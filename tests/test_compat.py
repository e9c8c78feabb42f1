"""A plugin built for another core is caught from its metadata, before anything imports it.

Every distribution here is a ``tmp_path`` one (``write_dist``) whose ``Requires-Dist`` names a
range of ``accelkw-core`` relative to the running core, so the tests hold across version bumps.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from accelkw_core import __version__
from accelkw_core.discovery import compat
from tests.conftest import good_plugin, run_accelkw, run_python, write_dist

CORE = Version(__version__)
NEXT = f"{CORE.major}.{CORE.minor + 1}"
THIS = f"{CORE.major}.{CORE.minor}"
OLD_RANGE = f"<{THIS}"  # built for the cores before this one
FUTURE_RANGE = f">={NEXT}"  # needs a core not released yet
# Importing the module leaves a mark, so a test can tell it was never imported.
TRIPWIRE = """
    import pathlib
    pathlib.Path({mark!r}).write_text("imported")
"""


def stale(site: Path, mark: Path, name: str = "stale", spec: str = OLD_RANGE) -> None:
    source = textwrap.dedent(TRIPWIRE.format(mark=str(mark))) + textwrap.dedent(good_plugin(name))
    write_dist(
        site,
        f"acme-{name}",
        {name: f"acme_{name}"},
        {f"acme_{name}.py": source},
        "0.9.0",
        requires=[f"accelkw-core{spec}", "torch>=2.1"],
    )


def fresh(site: Path, name: str = "fresh", requires: tuple[str, ...] | None = None) -> None:
    reqs = (f"accelkw-core>={THIS},<{NEXT}",) if requires is None else requires
    write_dist(
        site,
        f"acme-{name}",
        {name: f"acme_{name}"},
        {f"acme_{name}.py": good_plugin(name)},
        requires=list(reqs),
    )


def listing(site: Path, *args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    result = run_accelkw(["plugins", "list", "--json", *args], site=site, env=env)
    return result.returncode, {p["name"]: p for p in result.json()}, result.stderr


# -- the verdict -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "core", "expected"),
    [
        (">=0.2,<0.3", "0.2.0", compat.OK),
        (">=0.2,<0.3", "0.2.7", compat.OK),
        (">=0.2,<0.3", "0.3.0", "core-too-new"),
        (">=0.2,<0.3", "0.1.9", "core-too-old"),
        (">=0.1.0", "0.2.0", compat.OK),
        ("<0.2", "0.2.0", "core-too-new"),
        ("~=0.2.1", "0.2.0", "core-too-old"),
        ("==0.2.*", "0.3.0", "core-too-new"),
        ("!=0.2.0", "0.2.0", "core-too-new"),
        # A pre-release of the core carries the API of the release it precedes.
        (">=0.3,<0.4", "0.3.0rc1", compat.OK),
        (">=0.3,<0.4", "0.3.0.dev2", compat.OK),
        (">=0.2,<0.3", "0.3.0.dev2", "core-too-new"),
        (">=0.2,<0.3", "0.2.1+local", compat.OK),
        (">=0.2,<0.3", "0.2.0.post1", compat.OK),
        # A range that names a pre-release is applied as written.
        (">=0.3.0rc2", "0.3.0rc1", "core-too-old"),
        (">=0.3.0rc1", "0.3.0rc1", compat.OK),
        ("", "0.2.0", compat.NO_RANGE),
        (None, "0.2.0", compat.NO_RANGE),
        ("not a range", "0.2.0", compat.NO_RANGE),
    ],
)
def test_verdict(spec: str | None, core: str, expected: str) -> None:
    assert compat.verdict(spec, core) == expected


@pytest.mark.parametrize(
    ("core", "expected"),
    [
        ("0.2.0", ">=0.2,<0.3"),
        ("0.2.5", ">=0.2,<0.3"),
        ("0.3.0rc1", ">=0.3.0rc1,<0.4"),
        ("1.4.2", ">=1.4,<2"),
    ],
)
def test_the_range_a_new_plugin_declares(core: str, expected: str) -> None:
    assert compat.core_range_for(core) == expected
    assert compat.verdict(expected, core) == compat.OK


def test_the_core_requirement_is_read_by_packaging() -> None:
    requires = [
        "torch>=2.1",
        "accelkw-core-extras>=9",  # another distribution, not the core
        "Accelkw_Core >=0.2, <0.3 ; python_version >= '3'",
        "accelkw-core<0.1; extra == 'old'",
        "accelkw-core<0.1; python_version < '3'",
        "not a requirement !!",
    ]
    assert compat.core_requirement(requires) == ">=0.2,<0.3"
    assert compat.core_requirement(["torch"]) is None
    assert compat.core_requirement(None) is None
    assert compat.core_requirement(["accelkw-core"]) == ""


def test_requirements_are_read_from_the_metadata_headers_only(site: Path) -> None:
    # A Requires-Dist line in the description is not a header, as importlib_metadata reads it.
    fresh(site, "headers")
    info = site / "acme_headers-1.0.0.dist-info" / "METADATA"
    info.write_text(info.read_text() + "\nRequires-Dist: accelkw-core<0.0.1 (the description)\n")
    _, plugins, _ = listing(site)
    assert plugins["headers"]["status"] == "loaded"
    assert plugins["headers"]["compat"]["core_range"] == f">={THIS},<{NEXT}"


def test_an_egg_info_range_is_read_from_its_requires_txt(site: Path, tmp_path: Path) -> None:
    source = textwrap.dedent(TRIPWIRE.format(mark=str(tmp_path / "imported")))
    (site / "acme_eggy.py").write_text(source + textwrap.dedent(good_plugin("eggy")))
    egg = site / "acme_eggy.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: acme-eggy\nVersion: 0.9.0\n")
    (egg / "entry_points.txt").write_text("[accelkw]\neggy = acme_eggy\n")
    (egg / "requires.txt").write_text(
        f"torch>=2.1\naccelkw-core{OLD_RANGE}\n\n[dev]\naccelkw-core\n"
    )
    _, plugins, _ = listing(site)
    assert plugins["eggy"]["status"] == "incompatible"
    assert plugins["eggy"]["compat"]["core_range"] == OLD_RANGE
    assert not (tmp_path / "imported").exists()


# -- status, listing, strict -------------------------------------------------------------------


def test_incompatible_plugin_is_listed_with_its_range_and_fix_and_never_imported(
    site: Path, tmp_path: Path
) -> None:
    mark = tmp_path / "imported"
    stale(site, mark)
    fresh(site)
    code, plugins, stderr = listing(site)
    assert code == 0
    assert not mark.exists(), "the incompatible plugin's module was imported"
    old = plugins["stale"]
    assert old["status"] == "incompatible"
    assert old["handlers"] == [] and old["load_ms"] == 0
    assert old["error"]["type"] == "IncompatibleCore"
    assert old["compat"] == {
        "core_range": OLD_RANGE,
        "core_version": __version__,
        "fix": "pip install -U acme-stale",
        "note": None,
    }
    message = old["error"]["message"]
    assert f"acme-stale requires accelkw-core{OLD_RANGE}" in message
    assert f"accelkw-core {__version__} is installed" in message
    assert "pip install -U acme-stale" in message
    assert f'pip install "accelkw-core{OLD_RANGE}"' in message
    assert plugins["fresh"]["status"] == "loaded"
    assert plugins["fresh"]["compat"]["core_range"] == f">={THIS},<{NEXT}"
    assert "plugin 'stale' incompatible" in stderr

    table = run_accelkw(["plugins", "list"], site=site)
    row = next(line for line in table.stdout.splitlines() if " stale " in f" {line} ")
    assert re.search(r"\bincompatible\b", row)
    assert OLD_RANGE in row and __version__ in row and "pip install -U acme-stale" in row
    assert not mark.exists()


def test_a_core_too_old_for_the_plugin_says_to_upgrade_the_core(site: Path, tmp_path: Path) -> None:
    stale(site, tmp_path / "imported", name="future", spec=FUTURE_RANGE)
    _, plugins, _ = listing(site)
    future = plugins["future"]
    assert future["status"] == "incompatible"
    assert future["compat"]["fix"] == f'pip install "accelkw-core{FUTURE_RANGE}"'
    assert "upgrade the core" in future["error"]["message"]


def test_strict_fails_on_an_incompatible_plugin(site: Path, tmp_path: Path) -> None:
    # An allow-list keeps out whatever else this environment has installed.
    fresh(site)
    assert listing(site, "--strict", ACCELKW_PLUGINS="fresh")[0] == 0
    stale(site, tmp_path / "imported")
    code, _, stderr = listing(site, "--strict", ACCELKW_PLUGINS="fresh,stale")
    assert code == 1
    assert "plugin 'stale' incompatible: acme-stale requires" in stderr


def test_a_denied_plugin_is_disabled_not_judged(site: Path, tmp_path: Path) -> None:
    stale(site, tmp_path / "imported")
    code, plugins, _ = listing(
        site, "--strict", ACCELKW_PLUGINS="stale", ACCELKW_DISABLE_PLUGINS="stale"
    )
    assert code == 0
    assert plugins["stale"]["status"] == "disabled"


def test_show_names_the_incompatible_plugin_instead_of_an_unknown_handler(
    site: Path, tmp_path: Path
) -> None:
    stale(site, tmp_path / "imported")
    result = run_accelkw(["plugins", "show", "stale"], site=site)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "plugin 'stale' (distribution acme-stale): acme-stale requires" in result.stderr


def test_no_range_loads_with_a_note_in_show(site: Path) -> None:
    fresh(site, "loose", requires=("accelkw-core",))
    fresh(site, "bare", requires=())
    _, plugins, _ = listing(site)
    for name in ("loose", "bare"):
        assert plugins[name]["status"] == "loaded"
        assert "nothing says which core it was built for" in plugins[name]["compat"]["note"]
    assert plugins["loose"]["compat"]["core_range"] == ""
    assert plugins["bare"]["compat"]["core_range"] is None

    shown = run_accelkw(["plugins", "show", "loose"], site=site)
    assert shown.returncode == 0, shown.stderr
    assert "note: acme-loose names no version range of accelkw-core" in shown.stdout
    data = run_accelkw(["plugins", "show", "bare", "--json"], site=site).json()
    assert data["note"].startswith("acme-bare does not require accelkw-core")

    fresh(site)
    shown = run_accelkw(["plugins", "show", "fresh"], site=site).stdout
    assert f"built for accelkw-core>={THIS},<{NEXT}" in shown and "note:" not in shown


def test_a_required_incompatible_plugin_says_why(site: Path, tmp_path: Path) -> None:
    stale(site, tmp_path / "imported")
    (tmp_path / "accelkw.toml").write_text('[plugins]\nrequired = ["stale"]\n')
    result = run_python(
        """
        from accelkw_core.config.settings import resolve_settings
        from accelkw_core.errors import RequirementError
        try:
            resolve_settings()
        except RequirementError as exc:
            print(exc)
        """,
        site=site,
        env={"ACCELKW_CONFIG": str(tmp_path / "accelkw.toml")},
    )
    assert "is incompatible with the installed core: acme-stale requires" in result.stdout, (
        result.stdout + result.stderr
    )


# -- the run warns once ------------------------------------------------------------------------

RESOLVE_TWICE = """
    import json, warnings
    from accelkw_core.config.settings import resolve_settings
    from accelkw_core.errors import IncompatiblePluginWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = resolve_settings()
        resolve_settings()
    print(json.dumps({
        "warnings": [str(w.message) for w in caught
                     if issubclass(w.category, IncompatiblePluginWarning)],
        "composed": [h.name for h in first.handlers],
    }))
"""


def test_a_run_that_would_compose_it_warns_once_naming_it(site: Path, tmp_path: Path) -> None:
    mark = tmp_path / "imported"
    stale(site, mark)
    fresh(site)
    result = run_python(RESOLVE_TWICE, site=site)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert len(out["warnings"]) == 1
    assert out["warnings"][0].startswith(
        "plugin 'stale' (acme-stale) was not loaded, so this run goes without"
    )
    assert "pip install -U acme-stale" in out["warnings"][0]
    assert "fresh" in out["composed"] and "stale" not in out["composed"]
    assert not mark.exists()


def test_no_warning_when_every_plugin_fits(site: Path) -> None:
    fresh(site)
    result = run_python(RESOLVE_TWICE, site=site)
    assert json.loads(result.stdout)["warnings"] == [], result.stderr


# -- the listing cache -----------------------------------------------------------------------

PROBE = """
    import contextlib, io, json, sys
    {before}
    from accelkw_core.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["plugins", "list", "--json"])
    print(json.dumps({{
        "metadata_read": "importlib_metadata" in sys.modules,
        "judged": "packaging.specifiers" in sys.modules,
        "status": {{p["name"]: p["status"] for p in json.loads(out.getvalue())}},
    }}))
"""


def probe(site: Path, cache: Path, before: str = "") -> dict[str, Any]:
    result = run_python(PROBE.format(before=before), site=site, env={"XDG_CACHE_HOME": str(cache)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_verdict_is_kept_with_the_listing(site: Path, tmp_path: Path) -> None:
    mark = tmp_path / "imported"
    stale(site, mark)
    fresh(site)
    cache = tmp_path / "xdg"
    cold = probe(site, cache)
    assert cold["metadata_read"] and cold["judged"]
    warm = probe(site, cache)
    assert not warm["metadata_read"] and not warm["judged"], "a warm listing read metadata"
    mine = {"fresh": "loaded", "stale": "incompatible"}
    assert {n: warm["status"][n] for n in mine} == {n: cold["status"][n] for n in mine} == mine
    assert not mark.exists()
    (stored,) = (cache / "accelkw").glob("listing-*.json")
    kept = {p["name"]: p for p in json.loads(stored.read_text())["listing"]["plugins"]}
    assert kept["stale"]["compat"]["core_range"] == OLD_RANGE
    assert kept["stale"]["compat"]["fix"] == "pip install -U acme-stale"


def test_another_core_version_invalidates_the_kept_verdict(site: Path, tmp_path: Path) -> None:
    stale(site, tmp_path / "imported")
    cache = tmp_path / "xdg"
    assert probe(site, cache)["status"]["stale"] == "incompatible"
    # The same site, run by an older core (a checkout on PYTHONPATH changes no dist-info).
    older = f"import accelkw_core._version as v; v.__version__ = '{CORE.major}.{CORE.minor - 1}.0'"
    if CORE.minor == 0:
        pytest.skip("no older minor release of this major version")
    again = probe(site, cache, before=older)
    assert again["metadata_read"], "the cache ignored the core's version"
    assert again["status"]["stale"] == "loaded"
