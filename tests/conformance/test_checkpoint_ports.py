"""Checkpoints of the ecosystem's scripts: tied weights, save-state hooks, main-process saves.

One script (``tests/checkpoint_port_workers.py``) run by both frameworks by the import switch: a
causal LM whose head shares the embedding's weight, and a "unet" that save-state hooks save with
its own ``save_pretrained`` into ``<checkpoint>/unet``, as diffusers' scripts do. Accelerate
1.15.0 and accelkw write the same bytes on one process and load each other's checkpoints; two
accelkw processes load Accelerate's, save from the main process only (no hang, everyone resumes
from it) and from every process, and Accelerate loads what they saved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import accelkw_core
from accelkw_core import CheckpointError
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.aliases import with_aliases, without_aliases
from accelkw_core.runtime.checkpoints.manifest import read_manifest
from accelkw_core.testing import run_workers
from tests import checkpoint_port_workers as port
from tests.conformance.differences import listed

ROOT = Path(__file__).resolve().parents[2]


def _one_process(framework: Any, folder: Path, *, load: Path | None = None) -> dict[str, Any]:
    """The script on one process: load ``load`` or train a step, then save into ``folder``."""
    acc = framework.Accelerator(cpu=True)
    lm, unet, optimizer = port.script(framework, acc, seed=0)
    if load is not None:
        acc.load_state(load)
    else:
        port.train_step(acc, lm, unet, optimizer, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Accelerate's note that it left lm_head.weight out
        acc.save_state(folder)
    found = {"weights": port.weights(acc, lm, unet), "tied": port.tied(acc, lm)}
    if framework is accelkw_core:
        acc.end_training()
    return found


def _loaded_by(framework: Any, folder: Path) -> dict[str, Any]:
    acc = framework.Accelerator(cpu=True)
    lm, unet, _ = port.script(framework, acc, seed=9)
    acc.load_state(folder)
    found = {"weights": port.weights(acc, lm, unet), "tied": port.tied(acc, lm)}
    if framework is accelkw_core:
        acc.end_training()
    return found


@pytest.mark.multiprocess
def test_tied_weights_and_hooks_move_between_the_frameworks_on_one_and_two_processes(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    theirs = _one_process(accelerate, tmp_path / "accel")
    ours = _one_process(accelkw_core, tmp_path / "one")
    # The same bytes: lm_head.weight left out of model.safetensors, the unet in unet/.
    for name in ("model.safetensors", "unet/config.json", f"unet/{port.UNET_WEIGHTS}"):
        assert (tmp_path / "accel" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert ours == theirs and ours["tied"]
    manifest = read_manifest(tmp_path / "one")
    assert manifest is not None
    # The hook wrote into the temporary folder, and its files are the checkpoint's.
    listed("checkpoint-hooks-and-lone-saves")
    assert {"unet/config.json", f"unet/{port.UNET_WEIGHTS}"} <= set(manifest.files)
    # Each framework resumes the other's checkpoint, on one process, ties kept.
    assert _loaded_by(accelkw_core, tmp_path / "accel") == theirs
    assert _loaded_by(accelerate, tmp_path / "one") == theirs

    r0, r1 = run_workers(
        port.two_processes,
        2,
        args=(str(tmp_path),),
        timeout=240,
        env={"OMP_NUM_THREADS": "1"},
    )
    for found in (r0, r1):
        assert found["wrapped"] == "DistributedDataParallel"
        assert found["accel"] == theirs["weights"] and found["accel-tied"]
        # Saved by the main process alone, resumed by both, ties kept.
        assert found["solo-loaded"] == r0["solo"] and found["solo-tied"]
        assert found["solo2-loaded"] == r0["solo2"]
        assert found["ours"] == r0["ours"]
        assert f"unet/{port.UNET_WEIGHTS}" in found["ours-files"]
        # Rank 1 wrote its own part of the save every process made, into that save.
        assert found["ours-part-1"]
        # Every process resumes the step the lone save recorded (rank 1 has no part of it).
        assert found["solo-step"] == r0["solo-step"] > 0
    # The lone save holds rank 0's random states only, as Accelerate's: rank 1 is told so,
    # rank 0 draws what it drew after the save.
    solo = read_manifest(tmp_path / "solo")
    assert solo is not None and "random_states_1.pkl" not in solo.files
    assert f"unet/{port.UNET_WEIGHTS}" in solo.files
    assert any(
        "Could not load random states" in w and "process 1" in w for w in r1["solo-warnings"]
    )
    assert not any("random states" in w for w in r0["solo-warnings"])
    assert not list(tmp_path.glob(f".*{atomic_folders.TMP_SUFFIX}"))
    # Accelerate resumes what two accelkw processes saved, together and from the main alone.
    for name in ("ours", "solo", "solo2"):
        loaded = _loaded_by(accelerate, tmp_path / name)
        assert loaded["weights"] == r0[name] and loaded["tied"], name


def test_a_failing_or_killed_save_hook_leaves_the_previous_checkpoint_whole(
    tmp_path: Path,
) -> None:
    acc = accelkw_core.Accelerator(cpu=True)
    lm, unet, optimizer = port.script(accelkw_core, acc)
    port.train_step(acc, lm, unet, optimizer, seed=1)
    acc.save_state(tmp_path / "ckpt")
    saved = port.weights(acc, lm, unet)
    before = read_manifest(tmp_path / "ckpt")
    port.train_step(acc, lm, unet, optimizer, seed=2)

    def fails(models: list[Any], weights: list[Any], output_dir: str) -> None:
        raise RuntimeError("disk of the unet's shard went away")

    handle = acc.register_save_state_pre_hook(fails)
    with pytest.raises(CheckpointError, match=r"pre-hook.*fails.*went away") as caught:
        acc.save_state(tmp_path / "ckpt")
    assert isinstance(caught.value.__cause__, RuntimeError)
    handle.remove()
    assert read_manifest(tmp_path / "ckpt") == before
    assert not list(tmp_path.glob(f".*{atomic_folders.TMP_SUFFIX}"))

    # A load hook that fails: nothing else is loaded (the lm keeps its weights); what the
    # script's hook, called first, loaded into the unet stays (no copy of a model is kept).
    def load_fails(models: list[Any], input_dir: str) -> None:
        raise ValueError("config mismatch")

    def part(weights: dict[str, Any], prefix: str) -> dict[str, Any]:
        return {k: v for k, v in weights.items() if k.startswith(prefix)}

    current = port.weights(acc, lm, unet)
    load_handle = acc.register_load_state_pre_hook(load_fails)
    with pytest.raises(CheckpointError, match=r"load_state pre-hook.*config mismatch.*not undone"):
        acc.load_state(tmp_path / "ckpt")
    after = port.weights(acc, lm, unet)
    assert part(after, "0.") == part(current, "0.")
    assert part(after, "1.") == part(saved, "1.") != part(current, "1.")
    load_handle.remove()
    # A hook's file damaged on disk is found before any hook reads it.
    weights_file = tmp_path / "ckpt" / "unet" / port.UNET_WEIGHTS
    data = bytearray(weights_file.read_bytes())
    data[-1] ^= 0xFF
    weights_file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"unet/diffusion_pytorch_model\.safetensors"):
        acc.load_state(tmp_path / "ckpt")
    assert port.weights(acc, lm, unet) == after
    data[-1] ^= 0xFF
    weights_file.write_bytes(bytes(data))
    acc.load_state(tmp_path / "ckpt")
    assert port.weights(acc, lm, unet) == saved
    acc.save_state(tmp_path / "ckpt")  # the failing hook was removed: the script's hook saves
    again = read_manifest(tmp_path / "ckpt")
    assert again is not None and before is not None and again.files == before.files
    acc.end_training()

    # Killed inside the hook, with the new unet written into the new temporary folder.
    run = tmp_path / "killed"
    run.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.checkpoint_port_workers", str(run)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert list(run.glob(f".*{atomic_folders.TMP_SUFFIX}")), "the kill was not inside the save"
    first = _loaded_by(accelkw_core, run / "ckpt")
    again = accelkw_core.Accelerator(cpu=True)
    lm2, unet2, optimizer2 = port.script(accelkw_core, again)
    port.train_step(again, lm2, unet2, optimizer2, seed=1)
    assert first["weights"] == port.weights(again, lm2, unet2)
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        again.save_state(run / "ckpt")  # the next save sweeps the dead one's temporary
    assert any("interrupted" in str(w.message) for w in notes)
    assert not list(run.glob(f".*{atomic_folders.TMP_SUFFIX}"))
    again.end_training()


def test_shared_storage_keeps_every_value() -> None:
    base = torch.arange(6.0)
    tied = torch.nn.Parameter(torch.ones(2, 3))
    state = {"a": tied, "b": tied, "first": base[:3], "second": base[3:]}
    kept = without_aliases(state)
    # A second name of one tensor is left out; another part of the same storage is copied.
    assert list(kept) == ["a", "first", "second"]
    assert kept["second"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert torch.equal(kept["second"], base[3:])
    read = {"a": torch.zeros(2, 3), "first": base[:3], "second": base[3:]}
    filled = with_aliases(read, state)
    # The name left out gets the kept name's tensor; halves of one buffer are not ties.
    assert filled["b"] is read["a"] and set(filled) == set(state)
