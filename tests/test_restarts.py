"""Runs that survive killed workers: ``accelkw launch --max-restarts`` and examples/resume/train.py.

Workers are killed with SIGKILL at chosen moments (inside a save, between saves, just after one;
see tests/restart_worker.py); torchrun restarts the worker group, the script resumes from its
newest complete checkpoint, and the final weights must equal an uninterrupted run's, bit for
bit. The example trains 3 epochs (18 steps on 2 processes, 36 on 1) and saves every 4 steps.

The default run kills one 2-process run three times (once at each moment, so 3 restarts) and a
1-process run once, inside a save; each 2-process moment alone is a ``slow`` case.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelkw_core.runtime.checkpoints.project import is_complete, numbered_checkpoints
from accelkw_core.testing import free_port

pytestmark = pytest.mark.multiprocess

WORKER = Path(__file__).resolve().parent / "restart_worker.py"
SAVE_EVERY = 4
TIMEOUT = 240


def launch(
    tmp_path: Path,
    name: str,
    nproc: int,
    *options: str,
    faults: str = "",
    script: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the example through ``accelkw launch`` in ``tmp_path/name``; the run and its folder.

    ``options`` are the launcher's, ``script`` more of the example's own arguments."""
    folder = tmp_path / name
    folder.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCELKW_", "RESTART_", "TORCHELASTIC_"))
    }
    if faults:
        env.update(RESTART_FAULTS=faults, RESTART_MARKER=str(folder / "marker"))
    command = [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", str(nproc)]
    command += [*options, str(WORKER), "--project-dir", str(folder), "--out", str(folder / "final")]
    run = subprocess.run(
        [*command, "--cpu", *script],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run, folder


def weights(folder: Path) -> dict[str, object]:
    from safetensors.torch import load_file

    return dict(load_file(folder / "final" / "model.safetensors"))


def assert_bit_identical(folder: Path, reference: Path) -> None:
    import torch

    mine, theirs = weights(folder), weights(reference)
    assert sorted(mine) == sorted(theirs)
    for key, tensor in theirs.items():
        assert torch.equal(mine[key], tensor), key  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The run nobody kills, on 2 processes and on 1: the weights to match."""
    root = tmp_path_factory.mktemp("uninterrupted")
    return {nproc: launch(root, f"nproc{nproc}", nproc)[1] for nproc in (2, 1)}


def resumed_at(moment: str, step: int) -> int:
    """The step a run killed there resumes at: that of the newest complete checkpoint."""
    if moment == "save":  # the interrupted save never became a checkpoint
        return step - SAVE_EVERY
    return step // SAVE_EVERY * SAVE_EVERY


@pytest.mark.parametrize(
    ("nproc", "faults", "steps"),
    [
        pytest.param(2, "save:8:0,between:11:1,after:16:0", 18, id="2-three-moments"),
        pytest.param(1, "save:8:0", 36, id="1-during-a-save"),
        pytest.param(2, "save:8:0", 18, id="2-during-a-save", marks=pytest.mark.slow),
        pytest.param(2, "between:11:1", 18, id="2-between-saves", marks=pytest.mark.slow),
        pytest.param(2, "after:16:0", 18, id="2-just-after-a-save", marks=pytest.mark.slow),
    ],
)
def test_killed_workers_are_restarted_and_the_run_ends_bit_identical(
    tmp_path: Path, uninterrupted: dict[int, Path], nproc: int, faults: str, steps: int
) -> None:
    chosen = [fault.split(":") for fault in faults.split(",")]
    restarts = len(chosen)
    run, folder = launch(tmp_path, "run", nproc, "--max-restarts", str(restarts), faults=faults)
    # Every attempt started once. (The kills are told by the markers, each written just before
    # its kill: torchrun's report names the first failure by a timestamp in whole seconds, so
    # it may name the survivor instead.)
    assert run.stdout.count("(restart ") == restarts + 1, run.stdout
    assert "no checkpoint yet: starting fresh (restart 0)" in run.stdout
    for attempt, (moment, step, _) in enumerate(chosen, start=1):
        # Attempt i was killed at fault i, and attempt i + 1 resumed where it should.
        marker = (folder / f"marker.{attempt - 1}").read_text()
        assert f"resumed at step {resumed_at(moment, int(step))} (restart {attempt})" in run.stdout
        if moment == "save":
            # Killed with the optimizer's file, the weights and the scheduler in the temporary
            # folder (written in that order), before the manifest: the next save removed that
            # folder, saying so.
            written = marker.split()
            assert {"optimizer.bin", "model.safetensors", "scheduler.bin"} <= set(written)
            assert "accelkw_checkpoint.json" not in written
            assert "left by a save that was interrupted" in run.stderr
    assert f"done: {steps} steps" in run.stdout
    # total_limit=2: the two newest checkpoints, complete, and nothing else.
    checkpoints = folder / "checkpoints"
    kept = numbered_checkpoints(checkpoints)
    assert len(kept) == 2 and all(is_complete(path) for _, path in kept)
    assert sorted(p.name for p in checkpoints.iterdir()) == [path.name for _, path in kept]
    assert_bit_identical(folder, uninterrupted[nproc])


def test_killed_workers_of_a_run_saving_in_the_background_end_bit_identical(
    tmp_path: Path, uninterrupted: dict[int, Path]
) -> None:
    # --async-saves: each save_state returns once staged and a thread writes and commits it.
    # Rank 0 is killed inside the background write of step 8's save (its files all written,
    # before the manifest), then rank 1 between saves. The weights must be those of the
    # uninterrupted run (which saved synchronously: where a save is written changes nothing).
    faults = "write:8:0,between:11:1"
    run, folder = launch(
        tmp_path, "run", 2, "--max-restarts", "2", faults=faults, script=("--async-saves",)
    )
    assert run.stdout.count("(restart ") == 3, run.stdout
    written = (folder / "marker.0").read_text().split()
    assert {"model.safetensors", "optimizer.bin", "scheduler.bin"} <= set(written)
    assert "accelkw_checkpoint.json" not in written
    assert "resumed at step 4 (restart 1)" in run.stdout
    assert "left by a save that was interrupted" in run.stderr
    # Killed at step 11, rank 1 takes its part of step 8's background save with it if that
    # save was still being written (it is small: it almost never is).
    assert re.search(r"resumed at step (4|8) \(restart 2\)", run.stdout), run.stdout
    assert "done: 18 steps" in run.stdout
    kept = numbered_checkpoints(folder / "checkpoints")
    assert len(kept) == 2 and all(is_complete(path) for _, path in kept)
    assert_bit_identical(folder, uninterrupted[2])


@pytest.mark.slow
def test_two_machines_restart_together_through_a_c10d_rendezvous(
    tmp_path: Path, uninterrupted: dict[int, Path]
) -> None:
    # Two launchers of one process each, as on two machines; the worker of the second is
    # killed between saves. Both groups restart and the run ends as the 2-process one does.
    port = free_port()
    options = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-id", "job"]
    options += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "3"]
    folder = tmp_path / "run"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "TORCHELASTIC_"))}
    env.update(RESTART_FAULTS="between:11:1", RESTART_MARKER=str(folder / "marker"))
    command = [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", "1"]
    command += [*options, str(WORKER), "--project-dir", str(folder), "--out", str(folder / "final")]
    nodes = [
        subprocess.Popen(
            [*command, "--cpu"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        outputs = [node.communicate(timeout=TIMEOUT) for node in nodes]
    finally:
        for node in nodes:
            node.kill()  # a launcher left running past the timeout (its workers die with it)
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    assert (folder / "marker.0").exists()
    stdout = "".join(out for out, _ in outputs)
    assert "resumed at step 8" in stdout and "done: 18 steps" in stdout
    assert_bit_identical(folder, uninterrupted[2])
