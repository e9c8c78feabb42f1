"""Saves that never wait for another process, and exit paths with no collective (issue 39, 2-4).

Replicated state (DDP) is saved with no rendezvous: the main process commits the shared part on
its own, each process writes its own part into the save it called, whenever it calls. On two
gloo processes: a rank 7 s late lands its part in the save it asked for while the main process
does not wait; a save from the main process only returns at once and every rank resumes the
step it recorded; a load-state hook registered on the main process only runs, the collectives
still in step; leaving a ``with accelerator:`` block by an exception, and ``end_training`` while
an exception unwinds, wait for no other process (background saves on); FSDP2 with one rank not
calling is a clear error naming it. Under
``accelkw launch`` (torchrun): a rank raising with a background save in flight ends the job in
seconds, and with ``save_on_each_node`` each machine's local main writes its own copy (two
"machines" on this host, each with its own working folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from accelkw_core.runtime.checkpoints.manifest import read_manifest
from accelkw_core.runtime.checkpoints.parts import read_part
from accelkw_core.testing import free_port, run_workers
from tests import no_wait_workers as workers

pytestmark = pytest.mark.multiprocess

ENV = {"OMP_NUM_THREADS": "1"}
LATE_S = 7.0


def test_a_rank_seven_seconds_late_lands_its_part_in_its_save_and_the_main_does_not_wait(
    tmp_path: Path,
) -> None:
    r0, r1 = run_workers(workers.late_rank, 2, args=(str(tmp_path), LATE_S), timeout=180, env=ENV)
    # The main process's save returned without waiting for rank 1 (compared with the 7 s by
    # which rank 1 is late, not with a tight figure).
    assert r0["save-a-s"] < LATE_S
    manifest = read_manifest(tmp_path / "A")
    assert manifest is not None and manifest.save is not None
    assert "random_states_0.pkl" in manifest.files
    # Rank 1's part is in A, recorded as A's (not B's, saved right after by both).
    assert read_part(tmp_path / "A", manifest, 1) is not None
    b = read_manifest(tmp_path / "B")
    assert b is not None and b.save != manifest.save
    # Both resume A: rank 1 from its own part (no warning), drawing what it drew after it.
    for r in (r0, r1):
        assert r["step"] == 2
        assert not [w for w in r["warnings"] if "random states" in w]
        assert r["draw-after-load"] == r["draw-after-a"]


def test_automatic_naming_names_the_same_folder_on_a_process_that_comes_after_the_commit(
    tmp_path: Path,
) -> None:
    r0, r1 = run_workers(
        workers.automatic_naming_late, 2, args=(str(tmp_path),), timeout=180, env=ENV
    )
    # Rank 1 saw checkpoint_0 committed before it called, and still named checkpoint_0.
    assert r0 == r1 == {"saved": "checkpoint_0", "next": 1}
    folder = tmp_path / "checkpoints" / "checkpoint_0"
    manifest = read_manifest(folder)
    assert manifest is not None and read_part(folder, manifest, 1) is not None
    assert sorted(p.name for p in folder.parent.iterdir()) == ["checkpoint_0"]


def test_a_main_only_save_waits_for_no_one_and_every_rank_resumes_its_step(
    tmp_path: Path,
) -> None:
    r0, r1 = run_workers(workers.main_only, 2, args=(str(tmp_path),), timeout=180, env=ENV)
    # No join timeout: the save costs its writing (the old rendezvous waited 5 s here).
    assert r0["save-s"] < 5.0
    assert r0["saved-step"] == r1["saved-step"] == 3
    # Every rank resumes the step the checkpoint records, so accumulation stays in step.
    assert r0["step"] == r1["step"] == 3
    assert r0["weights"] == r1["weights"]
    # Rank 1 has no part in it: Accelerate's words, and what is restored instead.
    (warning,) = [w for w in r1["warnings"] if "random states" in w]
    assert "Could not load random states" in warning and "process 1" in warning
    assert "step and data loaders' positions" in warning
    assert not [w for w in r0["warnings"] if "random states" in w]


def test_a_load_hook_registered_on_the_main_process_only_runs_there(tmp_path: Path) -> None:
    r0, r1 = run_workers(workers.load_hook_on_main, 2, args=(str(tmp_path),), timeout=180, env=ENV)
    assert len(r0["calls"]) == 1 and r0["calls"][0][1] == "ckpt"
    assert r1["calls"] == []
    assert r0["restored"] and r1["restored"]


def test_exit_paths_wait_for_no_other_process_with_a_background_save(tmp_path: Path) -> None:
    r0, r1 = run_workers(workers.exit_paths, 2, args=(str(tmp_path),), timeout=180, env=ENV)
    assert r1["raised"] == "rank 1 fails inside its block"
    # Rank 1's __exit__ returned while rank 0 was in no collective at all.
    assert r0["rank1-left"]
    # Rank 0's end_training, while an exception unwound, finished its own background save.
    assert r0["committed"]


@pytest.mark.slow
def test_sharded_state_with_one_rank_not_saving_is_an_error_naming_it(tmp_path: Path) -> None:
    r0, r1 = run_workers(
        workers.sharded_missing_rank, 2, args=(str(tmp_path),), timeout=240, env=ENV
    )
    assert "process 1 did not call it" in r0["error"], r0["error"]
    assert "every process" in r0["error"]
    assert not r0["committed"] and not r1["committed"]


# -- under torchrun ------------------------------------------------------------------------------

RAISES = """
    import sys
    import torch
    from accelkw_core import Accelerator
    from accelkw_core.runtime.checkpoints import atomic_folders
    from accelkw_core.utils import AsyncCheckpointKwargs

    accelerator = Accelerator(cpu=True, kwargs_handlers=[AsyncCheckpointKwargs()])
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    raiser = int(sys.argv[1])
    commit = atomic_folders.commit_folder

    def slow_commit(temporary, final, *rest):
        (final.parent / "in-flight").write_text("yes")
        import time
        time.sleep(2)  # the background save is in flight when the rank raises
        commit(temporary, final, *rest)

    atomic_folders.commit_folder = slow_commit

    def step():
        accelerator.backward(model(torch.randn(8, 64)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()

    step()
    accelerator.save_state("ckpt")
    if accelerator.process_index == raiser:
        raise RuntimeError(f"rank {raiser} fails mid-run")
    for _ in range(100000):  # the healthy rank goes on training, in DDP's collectives
        step()
    accelerator.end_training()
"""


def _launch(
    script: Path, cwd: Path, *options: str, args: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "accelkw_core", "launch", *options, str(script), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _ended(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        output = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        output = proc.communicate()[0]
        pytest.fail(f"the job did not end within {timeout:.0f}s (a hang):\n{output[-3000:]}")
    return proc.returncode, output, time.monotonic() - start


@pytest.mark.parametrize("raiser", [0, 1])
def test_a_rank_raising_with_a_background_save_in_flight_ends_the_job(
    tmp_path: Path, raiser: int
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RAISES))
    # The launcher's own limit is the hang guard: the collective timeout is 30 minutes.
    code, output, took = _ended(
        _launch(script, tmp_path, "--nproc-per-node", "2", args=(str(raiser),)), 150
    )
    print(f"the job ended {took:.1f}s after its launch")
    assert code != 0
    assert f"rank {raiser} fails mid-run" in output
    assert (tmp_path / "in-flight").exists(), output[-3000:]
    if raiser == 0:
        # The raising rank finished its own background save before it exited.
        manifest = read_manifest(tmp_path / "ckpt")
        assert manifest is not None and "model.safetensors" in manifest.files


EACH_NODE = """
    import sys
    import torch
    from accelkw_core import Accelerator, ProjectConfiguration

    config = ProjectConfiguration(save_on_each_node=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(8, 4)).pow(2).mean())
    optimizer.step()
    accelerator.save_state("ckpt")  # relative: each machine's own disk (its working folder)
    expected = torch.rand(3)
    accelerator.wait_for_everyone()
    torch.rand(5)
    accelerator.load_state("ckpt")
    assert torch.equal(torch.rand(3), expected), "this process's own random states"
    accelerator.end_training()
"""


@pytest.mark.slow
def test_each_machines_local_main_writes_its_own_copy_with_save_on_each_node(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(EACH_NODE))
    port = str(free_port())
    machines = []
    for node in (0, 1):
        disk = tmp_path / f"machine{node}"
        disk.mkdir()
        machines.append(
            _launch(
                script,
                disk,
                *("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2"),
                *("--master-addr", "127.0.0.1", "--master-port", port),
            )
        )
    for proc in machines:
        code, output, _ = _ended(proc, 240)
        assert code == 0, output[-3000:]
    for node, (local_main, other) in enumerate([(0, 1), (2, 3)]):
        folder = tmp_path / f"machine{node}" / "ckpt"
        manifest = read_manifest(folder)
        assert manifest is not None, f"machine {node} has no copy"
        assert f"random_states_{local_main}.pkl" in manifest.files
        assert "model.safetensors" in manifest.files
        # The machine's other process put its own part into its machine's copy.
        assert read_part(folder, manifest, other) is not None
