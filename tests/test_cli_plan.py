"""``accelkw plan`` and ``accelkw config check``: effective settings and a dry run, text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core.cli.main import main
from accelkw_core.discovery.default_registry import set_registry


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    rh.clean_env(monkeypatch, tmp_path)
    undo = set_registry(rh.registry())
    yield
    undo()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def words(text: str) -> list[str]:
    """The lines of ``text`` with runs of spaces collapsed (alignment is not the point)."""
    return [" ".join(line.split()) for line in text.splitlines()]


ENABLING = """
[accelerator]
mixed_precision = "bf16"
cpu = true

[plugins]
enable = ["cast", "knobs", "ddp", "process_group"]

[handlers.knobs]
level = 3
tags = ["x"]

[handlers.ddp]
bucket_cap_mb = 50
"""

DISABLING = """
[plugins]
disable = ["ddp", "process_group"]
"""


def test_plan_for_a_config_that_enables_handlers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "accelkw.toml").write_text(ENABLING)
    code, out, _ = run(capsys, "plan", "--nproc-per-node", "2")
    assert code == 0
    lines = words(out)
    config = tmp_path / "accelkw.toml"
    assert lines[0] == f"plan: world size 2, device cpu, config {config}"
    assert f"* mixed_precision = 'bf16' (file {config} [accelerator])" in lines
    order = [line.split()[1] for line in lines if line.split()[0].rstrip(".").isdigit()]
    assert order == ["cast", "knobs", "process_group", "ddp"]  # ddp is after process_group
    assert f"* level = 3 (file {config} [handlers.knobs])" in lines
    assert "ratio = 0.5" in lines
    assert f"* tags = ['x'] (file {config} [handlers.knobs])" in lines
    assert f"* bucket_cap_mb = 50 (file {config} [handlers.ddp])" in lines
    # Each handler's plan, as apply will carry it out, every step naming its point.
    assert "-> [note] level 3" in lines
    assert "-> [model_wrapper] models wrapped in DDP" in lines and "-> [run] gloo group" in lines
    assert f"disabled: scale (not listed in [plugins] enable of {config})" in lines
    assert not any(line.startswith("warning:") for line in lines)


@pytest.mark.needs_torch
def test_plan_for_a_config_that_disables_handlers_warns_about_the_gaps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "accelkw.toml").write_text(DISABLING)
    code, out, _ = run(capsys, "plan", "--nproc-per-node", "2", "--json")
    assert code == 0
    data = json.loads(out)
    assert [h["name"] for h in data["handlers"]] == ["cast", "knobs", "scale"]
    assert set(data["disabled"]) == {"ddp", "process_group"}
    assert data["world_size"] == 2
    assert len(data["warnings"]) == 2
    assert "gradients will not be synchronised" in data["warnings"][0]
    assert "the 'ddp' handler is disabled (listed in [plugins] disable" in data["warnings"][0]
    assert "the 'process_group' handler is disabled" in data["warnings"][1]
    knobs = next(h for h in data["handlers"] if h["name"] == "knobs")
    assert knobs["plan"] == "level 1"  # the handler's plan: what apply carries out
    assert knobs["steps"] == [{"message": "level 1", "point": None, "provides": []}]
    level = next(f for f in knobs["fields"] if f["name"] == "level")
    assert level == {
        "name": "level",
        "value": 1,
        "default": 1,
        "changed": False,
        "source": "default",
    }


def test_plan_shows_env_and_marks_changed_values(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELKW_KNOBS__RATIO", "0.1")
    monkeypatch.setenv("ACCELKW_CPU", "1")
    code, out, _ = run(capsys, "plan")
    assert code == 0
    assert "* ratio = 0.1 (env ACCELKW_KNOBS__RATIO)" in words(out)
    assert "plan: world size 1, device cpu, config (none)" in out


def test_plan_with_a_bad_config_exits_1_with_the_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "accelkw.toml").write_text("[handlers.knobs]\nlevel = 'x'\n")
    code, out, err = run(capsys, "plan")
    assert code == 1 and out == ""
    assert "[handlers.knobs]: knobs.level: got 'x', expected an integer" in err


def test_config_check_prints_effective_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "mine.toml").write_text(ENABLING)
    code, out, _ = run(capsys, "config", "check", "mine.toml")
    assert code == 0
    assert out.splitlines()[0] == f"config: {tmp_path / 'mine.toml'}"
    assert "ok: 0 error(s)" in out
    code, out, _ = run(capsys, "config", "check", "mine.toml", "--json")
    data: dict[str, Any] = json.loads(out)
    assert data["ok"] is True
    assert data["accelerator"]["mixed_precision"]["value"] == "bf16"
    assert [h["name"] for h in data["handlers"]] == ["cast", "knobs", "process_group", "ddp"]


def test_config_check_reports_every_error_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "accelkw.toml").write_text(
        "[handlers.knobs]\nlevel = 99\n[handlers.dpp]\nbucket_cap_mb = 1\n"
    )
    code, out, err = run(capsys, "config", "check")
    assert code == 1
    assert "invalid: 2 error(s)" in out
    assert "knobs.level: got 99, expected a number >= 0 and <= 10" in err
    assert "handlers.dpp" in err and "(did you mean 'ddp'?)" in err
    code, out, _ = run(capsys, "config", "check", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and len(data["errors"]) == 2


def test_config_check_of_a_syntax_error_names_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "bad.toml").write_text("[accelerator\n")
    code, _, err = run(capsys, "config", "check", "bad.toml")
    assert code == 1
    assert f"{tmp_path / 'bad.toml'}:1:" in err and "invalid TOML" in err


def test_plan_creates_no_process_group_and_imports_no_torch_on_cpu(tmp_path: Path) -> None:
    (tmp_path / "accelkw.toml").write_text("[accelerator]\ncpu = true\n")
    code = (
        "import sys; from accelkw_core.cli.main import main;"
        "code = main(['plan', '--nproc-per-node', '4']);"
        "print('torch' in sys.modules, code)"
    )
    env = {"PATH": "/usr/bin:/bin", "ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.stdout.splitlines()[-1] == "False 0", out.stderr
