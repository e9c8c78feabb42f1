"""Discovery over real entry points: ``*.dist-info`` folders on the path of a fresh interpreter."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import good_plugin, run_accelkw, run_python, write_dist


def listing(site: Path, env: dict[str, str] | None = None) -> dict[str, dict]:
    result = run_accelkw(["plugins", "list", "--json"], site=site, env=env)
    assert result.returncode == 0, result.stderr
    return {p["name"]: p for p in result.json()}


COMPOSE_CHECK = """
    from accelkw_core import RunState
    from accelkw_core.runtime.composing.composition import compose
    state = RunState(cpu=True)
    applied = compose(state, [])
    print(",".join(type(h).name for h in applied))
    print("|".join(state.summary()))
"""


def test_good_plugin_lists_with_distribution_version_and_fields(site: Path) -> None:
    write_dist(
        site,
        "acme-gizmo",
        {"gizmo": "acme_gizmo"},
        {"acme_gizmo.py": good_plugin("gizmo")},
        "2.3.4",
    )
    plugins = listing(site)
    p = plugins["gizmo"]
    assert p["status"] == "loaded"
    assert p["error"] is None
    assert p["distribution"] == "acme-gizmo"
    assert p["version"] == "2.3.4"
    assert p["entry_point"] == "acme_gizmo"
    assert p["load_ms"] >= 0
    (handler,) = p["handlers"]
    assert handler["name"] == "gizmo"
    assert handler["class"] == "acme_gizmo.GizmoKwargs"
    assert handler["fields"] == [{"name": "level", "type": "int", "default": 1, "doc": "how much"}]


BROKEN = {
    "import_error": (
        {"bad_mod.py": "import no_such_module_xyz\n"},
        "bad_mod",
        "ModuleNotFoundError",
        "no_such_module_xyz",
    ),
    "exception_at_import": (
        {"bad_mod.py": "raise RuntimeError('kaboom at import')\n"},
        "bad_mod",
        "RuntimeError",
        "kaboom at import",
    ),
    "syntax_error": ({"bad_mod.py": "def broken(:\n"}, "bad_mod", "SyntaxError", "bad_mod.py"),
    "missing_attribute": (
        {"bad_mod.py": "x = 1\n"},
        "bad_mod:nothing_here",
        "AttributeError",
        "nothing_here",
    ),
    "missing_module": ({}, "not_installed_mod", "ModuleNotFoundError", "not_installed_mod"),
    "exit_at_import": ({"bad_mod.py": "import sys; sys.exit(3)\n"}, "bad_mod", "SystemExit", "3"),
    "wrong_hook_signature": (
        {
            "bad_mod.py": """
            from accelkw_core.plugin import hookimpl
            @hookimpl
            def accelkw_register_handlers(register, surprise):
                pass
        """
        },
        "bad_mod",
        "PluginValidationError",
        "surprise",
    ),
    "unknown_hook": (
        {
            "bad_mod.py": """
            from accelkw_core.plugin import hookimpl
            @hookimpl
            def accelkw_no_such_hook():
                pass
        """
        },
        "bad_mod",
        "UnknownHook",
        "accelkw_no_such_hook",
    ),
    "hook_raises": (
        {
            "bad_mod.py": """
            from accelkw_core.plugin import hookimpl
            @hookimpl
            def accelkw_register_handlers(register):
                raise ValueError("cannot register today")
        """
        },
        "bad_mod",
        "ValueError",
        "cannot register today",
    ),
    "not_a_dataclass": (
        {
            "bad_mod.py": """
            from accelkw_core.plugin import KwargsHandler, hookimpl
            class Plain(KwargsHandler):
                name = "plain"
            @hookimpl
            def accelkw_register_handlers(register):
                register(Plain)
        """
        },
        "bad_mod",
        "InvalidHandler",
        "not a dataclass",
    ),
    "field_without_default": (
        {
            "bad_mod.py": """
            from dataclasses import dataclass
            from accelkw_core.plugin import KwargsHandler, hookimpl
            @dataclass
            class NoDefault(KwargsHandler):
                name = "nodefault"
                size: int
            @hookimpl
            def accelkw_register_handlers(register):
                register(NoDefault)
        """
        },
        "bad_mod",
        "InvalidHandler",
        "NoDefault.size has no default",
    ),
    "no_name": (
        {
            "bad_mod.py": """
            from dataclasses import dataclass
            from accelkw_core.plugin import KwargsHandler, hookimpl
            @dataclass
            class Nameless(KwargsHandler):
                size: int = 1
            @hookimpl
            def accelkw_register_handlers(register):
                register(Nameless)
        """
        },
        "bad_mod",
        "InvalidHandler",
        "no valid registry name",
    ),
    "not_a_handler": (
        {
            "bad_mod.py": """
            from accelkw_core.plugin import hookimpl
            @hookimpl
            def accelkw_register_handlers(register):
                register(dict)
        """
        },
        "bad_mod",
        "InvalidHandler",
        "not a KwargsHandler subclass",
    ),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_plugin_is_recorded_and_others_keep_working(site: Path, kind: str) -> None:
    modules, target, error_type, fragment = BROKEN[kind]
    write_dist(site, "acme-broken", {"broken": target}, modules)
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})

    plugins = listing(site)
    broken = plugins["broken"]
    assert broken["status"] == "failed"
    assert broken["distribution"] == "acme-broken"
    assert broken["error"]["type"] == error_type
    assert fragment in broken["error"]["message"]
    assert broken["handlers"] == []
    assert plugins["gizmo"]["status"] == "loaded"

    table = run_accelkw(["plugins", "list"], site=site)
    assert table.returncode == 0
    row = next(line for line in table.stdout.splitlines() if " broken " in line)
    assert "failed" in row and fragment.split()[0] in row
    assert "plugin 'broken' failed" in table.stderr
    assert "Traceback" not in table.stderr

    assert run_accelkw(["plugins", "list", "--strict"], site=site).returncode == 1

    composed = run_python(COMPOSE_CHECK, site=site)
    assert composed.returncode == 0, composed.stderr
    assert "gizmo" in composed.stdout.splitlines()[0].split(",")
    assert "gizmo: level 1" in composed.stdout


def test_strict_passes_when_everything_loads(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    result = run_accelkw(["plugins", "list", "--strict"], site=site)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].split() == [
        "KIND",
        "NAME",
        "CLASS",
        "PLUGIN",
        "DISTRIBUTION",
        "VERSION",
        "STATUS",
        "REASON",
    ]


def test_two_distributions_claiming_one_handler_name_conflict(site: Path) -> None:
    write_dist(
        site, "acme-one", {"one": "acme_one"}, {"acme_one.py": good_plugin("clash", "OneKwargs")}
    )
    write_dist(
        site, "acme-two", {"two": "acme_two"}, {"acme_two.py": good_plugin("clash", "TwoKwargs")}
    )
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    plugins = listing(site)
    for name in ("one", "two"):
        assert plugins[name]["status"] == "conflict"
        message = plugins[name]["error"]["message"]
        assert "acme-one" in message and "acme-two" in message and "'clash'" in message
    assert run_accelkw(["plugins", "list", "--strict"], site=site).returncode == 1
    composed = run_python(COMPOSE_CHECK, site=site)
    handlers = composed.stdout.splitlines()[0].split(",")
    assert "gizmo" in handlers and "clash" not in handlers


def test_same_distribution_twice_on_the_path_is_one_plugin(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        write_dist(
            folder, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")}
        )
    import os

    result = run_accelkw(
        ["plugins", "list", "--json"], env={"PYTHONPATH": f"{first}{os.pathsep}{second}"}
    )
    gizmos = [p for p in result.json() if p["name"] == "gizmo"]
    assert len(gizmos) == 1 and gizmos[0]["status"] == "loaded"


MARKER_PLUGIN = """
    import os, pathlib
    pathlib.Path(os.environ["MARKER"]).write_text("imported")
""" + good_plugin("spy")


def test_denied_plugin_module_never_runs(site: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    write_dist(site, "acme-spy", {"spy": "acme_spy"}, {"acme_spy.py": MARKER_PLUGIN})
    env = {"MARKER": str(marker), "ACCELKW_DISABLE_PLUGINS": "spy"}
    plugins = listing(site, env)
    assert plugins["spy"]["status"] == "disabled"
    assert "ACCELKW_DISABLE_PLUGINS" in plugins["spy"]["error"]["message"]
    assert not marker.exists()
    # Denying by distribution name works too, and the module still never runs.
    plugins = listing(site, {"MARKER": str(marker), "ACCELKW_DISABLE_PLUGINS": "acme-spy"})
    assert plugins["spy"]["status"] == "disabled" and not marker.exists()
    # Without the deny-list the same module does run (the marker proves the test can see it).
    assert listing(site, {"MARKER": str(marker)})["spy"]["status"] == "loaded"
    assert marker.read_text() == "imported"


def test_allow_list_loads_only_the_named_plugins(site: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    write_dist(site, "acme-spy", {"spy": "acme_spy"}, {"acme_spy.py": MARKER_PLUGIN})
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    plugins = listing(site, {"MARKER": str(marker), "ACCELKW_PLUGINS": "gizmo"})
    assert plugins["gizmo"]["status"] == "loaded"
    assert plugins["spy"]["status"] == "disabled"
    assert "ACCELKW_PLUGINS" in plugins["spy"]["error"]["message"]
    assert not marker.exists()
    # An empty allow-list means none.
    plugins = listing(site, {"MARKER": str(marker), "ACCELKW_PLUGINS": ""})
    assert {p["status"] for p in plugins.values()} == {"disabled"}
    assert not marker.exists()


def test_autoload_off_reads_no_entry_points(site: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    write_dist(site, "acme-spy", {"spy": "acme_spy"}, {"acme_spy.py": MARKER_PLUGIN})
    result = run_accelkw(
        ["plugins", "list", "--json"],
        site=site,
        env={"MARKER": str(marker), "ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert result.returncode == 0
    assert result.json() == []
    assert not marker.exists()


def test_listing_never_imports_torch(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    result = run_python(
        """
        import sys, io, contextlib
        from accelkw_core.cli.main import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plugins", "list", "--json"]) == 0
            assert main(["plugins", "list"]) == 0
            assert main(["plugins", "show", "gizmo"]) == 0
        print("torch" in sys.modules)
        """,
        site=site,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_load_time_is_recorded_per_plugin(site: Path) -> None:
    slow = "import time\ntime.sleep(0.05)\n" + textwrap.dedent(good_plugin("slow"))
    write_dist(site, "acme-slow", {"slow": "acme_slow"}, {"acme_slow.py": slow})
    assert listing(site)["slow"]["load_ms"] >= 45
