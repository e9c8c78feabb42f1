"""``accelkw demo``: the main job runs end to end and its summary says what happened."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def demo(
    *args: str, cwd: Path, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env.update(extra_env or {})
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "accelkw_core", "demo", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return out, time.monotonic() - start


def test_the_demo_trains_on_two_processes_and_summarises(tmp_path: Path) -> None:
    out, seconds = demo("--steps", "20", "--trace-dir", "traces", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert text.startswith("accelkw demo: MLP on synthetic data, 2 CPU process(es), 20 steps")
    progress = re.findall(r"^step +(\d+)/20 +loss ([\d.]+) +samples/s ([\d,]+)$", text, re.M)
    assert [int(s) for s, _, _ in progress] == [1, 10, 20]
    found = re.search(
        r"^  loss: +([\d.]+) -> ([\d.]+) over 20 steps \(global batch 64\)$", text, re.M
    )
    assert found, text
    assert float(found.group(2)) < float(found.group(1))  # it learned
    assert re.search(r"^  throughput: +[\d,]+ samples/s$", text, re.M)
    assert "  processes:       2 on cpu, mixed precision 'bf16'" in text
    assert "  handlers applied (in order) and what each did:" in text
    assert seconds < 60

    if installed("accelkw_ddp", "accelkw_process_group"):
        assert "  parameters:      identical on every rank" in text
        assert "    ddp: wrapped Sequential in DistributedDataParallel" in text
    else:
        assert "  parameters:      not checked (no process group)" in text
        assert "gradients will not be synchronised" in out.stderr
    if installed("accelkw_autocast"):
        assert "    autocast: torch.autocast(device_type='cpu', dtype=torch.bfloat16" in text
    if installed("accelkw_profile"):
        trace_dir = tmp_path / "traces"
        assert f"  trace:           {trace_dir} (profile_0.json, profile_1.json)" in text
        trace = json.loads((trace_dir / "profile_0.json").read_text())
        assert trace["traceEvents"]
    else:
        assert "  trace:           none (no profiler installed" in text


def test_the_demo_follows_a_config_and_prints_json(tmp_path: Path) -> None:
    # An integration test: the trace below needs the profile plugin, imported, never skipped.
    import accelkw_profile  # noqa: F401

    (tmp_path / "demo.toml").write_text(
        '[accelerator]\nmixed_precision = "no"\n[plugins]\ndisable = []\n'
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    out, _ = demo(
        "--config",
        "demo.toml",
        "--nproc-per-node",
        "1",
        "--steps",
        "5",
        "--json",
        cwd=tmp_path,
        extra_env={"TMPDIR": str(temp)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)  # stdout is the JSON alone
    assert "accelkw demo: MLP on synthetic data" in out.stderr  # progress went to stderr
    assert re.search(r"^step +5/5 +loss", out.stderr, re.M)
    assert summary["world_size"] == 1 and summary["steps"] == 5
    assert summary["mixed_precision"] == "no"  # the config's choice, not the demo's bf16
    assert summary["param_spread"] == 0.0
    assert [step for step, _ in summary["losses"]] == [1, 5]
    # The traces went to a temporary folder, which the run removed.
    assert summary["traces"] == ["profile_0.json"] and summary["trace_kept"] is False
    # (torch may leave its own caches there; nothing of the demo's remains.)
    assert [p.name for p in temp.iterdir() if p.name.startswith("accelkw")] == []


def test_a_bad_demo_config_fails_before_any_worker_starts(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[accelerator]\nmixed_precision = 'fp4'\n")
    out, _ = demo("--config", "bad.toml", cwd=tmp_path)
    assert out.returncode == 1
    assert (
        "accelerator.mixed_precision: got 'fp4', expected one of 'no', 'fp16', 'bf16', 'fp8'"
        in (out.stderr)
    )
    assert "step" not in out.stdout


def test_the_summary_says_when_mixed_precision_was_not_applied() -> None:
    from accelkw_core.cli.demo_cmd import format_summary

    summary = {
        "world_size": 1,
        "device": "cpu",
        "mixed_precision": "bf16",
        "mixed_precision_applied": False,
        "log": [],
        "loss_first": 1.0,
        "loss_last": 0.5,
        "steps": 2,
        "global_batch": 4,
        "samples_per_s": 10.0,
        "param_spread": None,
        "trace_dir": None,
        "traces": [],
        "seconds": 1.0,
    }
    text = format_summary(summary)
    assert "mixed precision 'bf16' (not applied: no installed handler autocasts" in text
    assert "(not applied" not in format_summary({**summary, "mixed_precision_applied": True})
