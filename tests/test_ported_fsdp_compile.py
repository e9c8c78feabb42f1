"""A script written for Accelerate with FullyShardedDataParallelPlugin and TorchDynamoPlugin runs
with only its import lines changed (examples/ported/train_fsdp_compile_*.py), on 2 CPU processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

PORTED = Path(__file__).resolve().parents[1] / "examples" / "ported"


def _code_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("from accel")]


def test_only_the_import_lines_differ() -> None:
    ours = PORTED / "train_fsdp_compile_accelkw.py"
    theirs = PORTED / "train_fsdp_compile_accelerate.py"
    assert _code_lines(ours) == _code_lines(theirs)


def test_the_ported_script_trains_sharded_and_compiled(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    out = tmp_path / "result.json"
    script = PORTED / "train_fsdp_compile_accelkw.py"
    launch = [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*launch, str(script), "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["losses"][-1] < result["losses"][0]
    assert "1.linear.weight" in result["keys"], "full state dict keys, no _orig_mod prefix"
