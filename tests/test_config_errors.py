"""Every problem of a config at once (issue 42, item 2): ``accelkw config check``, ``accelkw
launch --config`` and ``Accelerator()`` report each bad value on a line of its own, naming the
table, the field, the value and what was expected; three bad fields of one table are three
lines, three bad tables are three."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core import Accelerator, ConfigError
from accelkw_core.config.settings import resolve_settings
from accelkw_core.errors import ConfigErrors
from tests.conftest import run_accelkw

ONE_TABLE = """
[handlers.knobs]
level = 99
mode = "slow"
verbose = "maybe"
"""
THREE_TABLES = """
bogus = 1

[accelerator]
mixed_precision = "fp32"

[plugins]
enable = "knobs"

[handlers.knobs]
level = -1
"""
# Needs no plugin: every problem is in the tables the core reads itself.
CORE_TABLES = """
[accelerator]
mixed_precision = "fp32"
cpu = "yes"
precision = "bf16"

[plugins]
disable = "profile"

[bogus]
x = 1
"""


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rh.clean_env(monkeypatch, tmp_path)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "accelkw.toml"
    path.write_text(text)
    return path


def test_three_bad_fields_of_one_table_are_three_errors(tmp_path: Path) -> None:
    path = write(tmp_path, ONE_TABLE)
    with pytest.raises(ConfigErrors) as caught:
        resolve_settings(config=path, env={}, registry=rh.registry())
    lines = str(caught.value).splitlines()
    assert [e.field for e in caught.value.errors] == ["level", "mode", "verbose"]  # type: ignore[attr-defined]
    assert len(lines) == 3 and all("[handlers.knobs]: knobs." in line for line in lines)
    assert "knobs.level: got 99, expected" in lines[0]
    assert "knobs.mode: got 'slow', expected" in lines[1]
    assert "knobs.verbose: got 'maybe', expected a boolean" in lines[2]
    collected = resolve_settings(config=path, env={}, registry=rh.registry(), collect_errors=True)
    assert [str(e) for e in collected.errors] == lines


def test_three_bad_tables_and_an_unknown_one_are_each_reported(tmp_path: Path) -> None:
    path = write(tmp_path, THREE_TABLES)
    with pytest.raises(ConfigError) as caught:  # ConfigErrors is a ConfigError
        resolve_settings(config=path, env={}, registry=rh.registry())
    lines = str(caught.value).splitlines()
    assert len(lines) == 4, lines
    for table, field in [
        ("accelkw.toml: config.bogus", "got 1"),
        ("[accelerator]", "accelerator.mixed_precision: got 'fp32'"),
        ("[plugins]", "plugins.enable: got 'knobs'"),
        ("[handlers.knobs]", "knobs.level: got -1"),
    ]:
        assert any(table in line and field in line for line in lines), (table, lines)


def test_the_accelerator_reports_every_error_of_its_config(tmp_path: Path) -> None:
    path = write(tmp_path, ONE_TABLE)
    with pytest.raises(ConfigErrors) as caught:
        Accelerator(config=path, registry=rh.registry())
    assert len(str(caught.value).splitlines()) == 3


def test_config_check_prints_one_line_per_error(tmp_path: Path) -> None:
    path = write(tmp_path, CORE_TABLES)
    result = run_accelkw(["config", "check", str(path)])
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("accelkw: error:")]
    assert len(errors) == 5, result.stderr
    for expected in [
        "[accelerator]: accelerator.mixed_precision: got 'fp32', expected one of",
        "[accelerator]: accelerator.cpu: got 'yes', expected a boolean",
        "[accelerator]: accelerator.precision: got 'bf16', expected one of the keys",
        "[plugins]: plugins.disable: got 'profile', expected a list of handler names",
        "config.bogus: got {'x': 1}, expected one of the tables",
    ]:
        assert sum(expected in line for line in errors) == 1, (expected, errors)
    assert "invalid: 5 error(s)" in result.stdout


def test_launch_reports_every_error_before_any_worker_starts(tmp_path: Path) -> None:
    path = write(tmp_path, CORE_TABLES)
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = run_accelkw(["launch", "--num_processes", "2", "--config", str(path), str(script)])
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("accelkw: error:")]
    assert len(errors) == 5, result.stderr
    assert not marker.exists()


def test_workers_report_every_error_of_a_config_their_code_names_once(tmp_path: Path) -> None:
    # A config only the script names: the launcher cannot see it, each worker raises.
    bad = tmp_path / "bad.toml"
    bad.write_text(CORE_TABLES)
    script = tmp_path / "train.py"
    script.write_text(f"from accelkw_core import Accelerator\nAccelerator(config={str(bad)!r})\n")
    result = run_accelkw(["launch", "--num_processes", "2", str(script)], timeout=240)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("accelkw: error:")]
    # Once each, whichever ranks got to raise it: torchrun stops the other workers as soon as
    # one fails, so a rank still starting (a loaded machine) may be stopped before it raises.
    assert len(errors) == 5, result.stderr
    assert all(line.endswith(("(ranks 0, 1)", "(rank 0)", "(rank 1)")) for line in errors), errors
    assert len({line.rsplit(" (rank", 1)[0] for line in errors}) == 5, errors
