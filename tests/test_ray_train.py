"""accelkw's Accelerator inside Ray Train (``ray.train.torch.TorchTrainer``, 2 CPU workers).

A real local Ray cluster runs examples/ray/train.py three times (tests/ray_driver.py): the
process group Ray set up is used as it is, DDP and FSDP2 wrap the model, checkpoints written by
``save_state`` are reported with ``ray.train.report``, and after worker 1 is killed (SIGKILL)
Ray's ``FailureConfig`` restarts the group, which resumes from ``ray.train.get_checkpoint()``
and ends with the weights of the uninterrupted run, bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "ray"


def test_ray_train_keeps_the_group_wraps_and_resumes_a_killed_worker_bit_for_bit(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "ACCELERATE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE), str(REPO)])
    env["RAY_DEDUP_LOGS"] = "0"
    out = subprocess.run(
        [sys.executable, str(REPO / "tests" / "ray_driver.py"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    facts = {
        n: json.loads((tmp_path / f"{n}.pt.json").read_text()) for n in ("plain", "killed", "fsdp")
    }
    # Ray's process group is the one the Accelerator uses: never initialised a second time.
    assert all(f["process_group_kept"] for f in facts.values()), facts
    assert facts["plain"]["model"] == "DistributedDataParallel" and not facts["plain"]["sharded"]
    assert facts["fsdp"]["sharded"], facts["fsdp"]
    # Killed at step 10 of the first attempt: the restarted group resumed from a checkpoint
    # reported before (step 4 or 8: Ray's controller registers a report after polling the
    # workers, so the newest one may not be registered yet when the worker dies) and finished.
    assert "resumed_at" not in facts["plain"]
    assert facts["killed"]["resumed_at"] in (4, 8), facts["killed"]
    assert facts["killed"]["steps"] == facts["plain"]["steps"] == 18
    plain = torch.load(tmp_path / "plain.pt", weights_only=True)
    killed = torch.load(tmp_path / "killed.pt", weights_only=True)
    assert plain.keys() == killed.keys()
    for key in plain:
        assert torch.equal(plain[key], killed[key]), key
