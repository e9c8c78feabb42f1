"""DDP checkpoints move between world sizes and between the frameworks, both ways.

A checkpoint saved on one process by accelkw and by Accelerate 1.15.0 (and one with the
``module.`` key names accelkw 0.2 saved on several processes) is loaded by accelkw on two
processes over gloo; what those two save is loaded on one process by accelkw and by Accelerate.
The same spawn checks that a load one process cannot apply is undone on both, and that a commit
failing on the committing process fails every process at once.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.manifest import read_manifest
from accelkw_core.testing import run_workers
from tests import checkpoint_workers as workers


def _one_process(framework: Any, seed: int) -> tuple[Any, Any, Any]:
    torch.manual_seed(seed)
    accelerator = framework.Accelerator(cpu=True)
    model = workers.small_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _trained(framework: Any, seed: int) -> tuple[Any, Any]:
    accelerator, model, optimizer = _one_process(framework, seed)
    accelerator.backward(model(torch.randn(3, 4)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    return accelerator, model


def _plain(model: Any) -> dict[str, list[float]]:
    return {k: v.flatten().tolist() for k, v in model.state_dict().items()}


def _legacy(source: Path, target: Path) -> None:
    """``source`` as accelkw 0.2 saved a 2-process run: the wrapper's ``module.`` key names."""
    import shutil

    shutil.copytree(source, target)
    weights = load_file(target / "model.safetensors")
    save_file({f"module.{k}": v for k, v in weights.items()}, target / "model.safetensors")
    manifest = read_manifest(target)
    assert manifest is not None
    manifest.files["model.safetensors"] = atomic_folders.entry_of(target / "model.safetensors")
    manifest.write(target)


@pytest.mark.multiprocess
def test_ddp_checkpoints_move_between_one_and_two_processes_and_both_frameworks(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    import accelkw_core

    ours, one = _trained(accelkw_core, 1)
    ours.save_state(tmp_path / "one")
    expected_one = _plain(one)
    ours.end_training()
    theirs, accel = _trained(accelerate, 2)
    theirs.save_state(tmp_path / "accel")
    expected_accel = _plain(accel)
    theirs.end_training()
    _legacy(tmp_path / "one", tmp_path / "legacy")

    r0, r1 = run_workers(
        workers.moves, 2, args=(str(tmp_path),), timeout=180, env={"OMP_NUM_THREADS": "1"}
    )
    for found in (r0, r1):
        assert found["wrapped"] == "DistributedDataParallel"
        assert found["one"] == expected_one and found["legacy"] == expected_one
        assert found["accel"] == expected_accel
        assert any("module." in w for w in found["legacy-warnings"])
        assert found["unchanged"]
    # 1 -> 2 processes: process 1 has no random states of its own in the checkpoint.
    assert any("Could not load random states" in w for w in r1["one-warnings"])
    assert "Refuses" in r1["refused"] and "KeyError" in r1["refused"]
    assert "process 1" in r0["refused"]
    # The commit fails on the process that commits, alone (rank 1 saved its part and goes on).
    assert "no space left" in r0["commit"] and r1["commit"] == ""

    # 2 -> 1 process, in both frameworks: Accelerate's key names, no wrapper prefix.
    assert all(
        not k.startswith("module.") for k in load_file(tmp_path / "two" / "model.safetensors")
    )
    # The failed commit left no temporary (rank 1's part waits in the inbox of "two" for a
    # commit of its save, and is superseded by its next save there).
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".two.accelkw-parts",
        "accel",
        "legacy",
        "one",
        "two",
    ]
    for framework in (accelkw_core, accelerate):
        accelerator, model, _ = _one_process(framework, 3)
        registered = workers.Refuses()  # Accelerate wants as many objects as the folder holds
        accelerator.register_for_checkpointing(registered)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accelerator.load_state(tmp_path / "two")
        assert _plain(model) == r0["two"] == r1["two"] and registered.n == 5
        accelerator.end_training()
