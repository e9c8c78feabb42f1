"""``accelkw plugins show``, ``--version`` and user errors on the command line."""

from __future__ import annotations

from pathlib import Path

from accelkw_core import __version__
from tests.conftest import good_plugin, run_accelkw, write_dist


def test_version() -> None:
    result = run_accelkw(["--version"])
    assert result.returncode == 0
    assert result.stdout.strip() == f"accelkw-core {__version__}"


def test_show_prints_fields_docs_and_provenance(site: Path) -> None:
    write_dist(
        site,
        "acme-gizmo",
        {"gizmo": "acme_gizmo"},
        {"acme_gizmo.py": good_plugin("gizmo")},
        "0.4.0",
    )
    result = run_accelkw(["plugins", "show", "gizmo"], site=site)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0] == "gizmo: acme_gizmo.GizmoKwargs"
    assert "from acme-gizmo 0.4.0" in out
    assert "A handler used by the tests." in out
    assert any(
        line.split()[:3] == ["level", "int", "1"] and "how much" in line
        for line in out.splitlines()
    )

    data = run_accelkw(["plugins", "show", "gizmo", "--json"], site=site).json()
    assert data["distribution"] == "acme-gizmo" and data["version"] == "0.4.0"
    assert data["fields"] == [{"name": "level", "type": "int", "default": 1, "doc": "how much"}]


def test_unknown_handler_is_one_line_with_suggestion_and_no_traceback(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    result = run_accelkw(["plugins", "show", "gizmoo"], site=site)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "no handler named 'gizmoo' is installed. Did you mean 'gizmo'?" in result.stderr
    assert "Available:" in result.stderr and "gizmo" in result.stderr


def test_rows_are_sorted_by_handler(site: Path) -> None:
    for name in ("zeta", "alpha", "mid"):
        write_dist(
            site, f"acme-{name}", {name: f"acme_{name}"}, {f"acme_{name}.py": good_plugin(name)}
        )
    out = run_accelkw(["plugins", "list"], site=site).stdout.splitlines()[1:]
    handlers = [line.split()[1] for line in out if line.split()[1] in ("zeta", "alpha", "mid")]
    assert handlers == ["alpha", "mid", "zeta"]
    assert {line.split()[0] for line in out if line.split()[1] in handlers} == {"handler"}


def test_a_command_builds_only_its_own_parser() -> None:
    from tests.conftest import run_python

    result = run_python(
        """
        import sys, io, contextlib
        from accelkw_core.cli.main import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plugins", "list"]) == 0
        print(sorted(m for m in sys.modules if m.startswith("accelkw_core.cli.")))
        """
    )
    assert result.returncode == 0, result.stderr
    assert "accelkw_core.cli.plugins_cmd" in result.stdout
    for other in ("launch_cmd", "demo_cmd", "plan_cmd", "env_cmd", "config_cmd"):
        assert other not in result.stdout


def test_help_and_unknown_commands_still_list_every_command() -> None:
    result = run_accelkw(["--help"])
    assert result.returncode == 0
    for command in ("plugins", "config", "plan", "launch", "demo", "env"):
        assert command in result.stdout
    unknown = run_accelkw(["frobnicate"])
    assert unknown.returncode == 2
    assert "choose from 'plugins', 'config', 'plan', 'launch', 'demo', 'env'" in unknown.stderr
