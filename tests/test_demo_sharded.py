"""``accelkw demo --fsdp`` and a ``[handlers.fsdp]`` config: the demo trains sharded and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess


def _demo(tmp_path: Path, *args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    done = subprocess.run(
        [sys.executable, "-m", "accelkw_core", "demo", "--steps", "4", "--json", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, object] = json.loads(done.stdout)
    return summary


@pytest.mark.parametrize("how", ["option", "config"])
def test_the_demo_runs_sharded_and_its_summary_says_so(tmp_path: Path, how: str) -> None:
    if how == "option":
        summary = _demo(tmp_path, "--fsdp")
    else:
        (tmp_path / "accelkw.toml").write_text("[handlers.fsdp]\nreshard_after_forward = false\n")
        summary = _demo(tmp_path, "--config", "accelkw.toml")
    assert summary["sharded"] is True and summary["param_spread"] is None
    handlers = summary["handlers"]
    assert isinstance(handlers, list) and "fsdp" in handlers and "ddp" not in handlers
    log = summary["log"]
    assert isinstance(log, list)
    assert any(e["message"].startswith("models will be sharded with fully_shard") for e in log)


def test_the_summary_text_says_sharded() -> None:
    from accelkw_core.cli.demo_cmd import format_summary

    summary = {
        "world_size": 2,
        "device": "cpu",
        "mixed_precision": "no",
        "log": [],
        "steps": 1,
        "global_batch": 2,
        "loss_first": 1.0,
        "loss_last": 0.5,
        "samples_per_s": 1.0,
        "seconds": 1.0,
        "param_spread": None,
        "sharded": True,
        "trace_dir": None,
    }
    assert "sharded across 2 processes" in format_summary(summary)
