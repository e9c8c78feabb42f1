"""Checkpoints a run can trust, with no plugin installed: whole or absent, loaded all or nothing.

Kills are real SIGKILLs of real processes (one, and two over gloo) at chosen moments of a save;
damage is done to the files on disk; every outcome is checked by loading in a fresh run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from accelkw_core import Accelerator, CheckpointError, ProjectConfiguration
from accelkw_core.errors import CheckpointNotFoundError, CheckpointWarning, ConfigError
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.manifest import MANIFEST, read_manifest
from accelkw_core.runtime.checkpoints.parts import read_part
from accelkw_core.testing import isolated_registry, plugin_of, run_workers
from tests import checkpoint_workers as workers
from tests.runtime_helpers import ScaleKwargs

ROOT = Path(__file__).resolve().parent.parent


# A registered object with a state: the workers' step counter.
Counter = workers.Steps


def make(**kwargs: Any) -> Accelerator:
    return Accelerator(cpu=True, registry=isolated_registry([plugin_of(ScaleKwargs)]), **kwargs)


def trained(acc: Accelerator, seed: int = 0) -> tuple[Any, ...]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    counter = Counter()
    acc.register_for_checkpointing(counter)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    step(acc, model, optimizer, scheduler)
    counter.n = 7
    return model, optimizer, scheduler, counter


def step(acc: Accelerator, model: Any, optimizer: Any, scheduler: Any) -> float:
    loss = model(torch.randn(3, 4)).pow(2).mean()
    acc.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return float(loss.detach())


def snapshot(model: Any, optimizer: Any, scheduler: Any, counter: Counter) -> dict[str, Any]:
    return {
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "optimizer": repr(optimizer.state_dict()),
        "scheduler": repr(scheduler.state_dict()),
        "counter": counter.n,
        "rng": torch.get_rng_state().clone(),
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a["weights"].keys() == b["weights"].keys()
        and all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
        and all(a[k] == b[k] for k in ("optimizer", "scheduler", "counter"))
        and torch.equal(a["rng"], b["rng"])
    )


# -- damage: one line naming the file, and nothing changed ------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": _truncate,
    "corrupted": _flip,
    "missing": Path.unlink,
}
FILES = [
    "model.safetensors",
    "optimizer.bin",
    "scheduler.bin",
    "custom_checkpoint_0.pkl",
    "random_states_0.pkl",
]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_file_fails_the_load_naming_it_and_changes_nothing(
    tmp_path: Path, name: str, damage: str
) -> None:
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    step(acc, *objects[:3])
    objects[3].n = 9
    before = snapshot(*objects)
    DAMAGE[damage](tmp_path / "ckpt" / name)
    with pytest.raises(CheckpointError) as caught:
        acc.load_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert name in message and "\n" not in message
    assert {"truncated": "truncated", "corrupted": "corrupted", "missing": "missing"}[
        damage
    ] in message
    assert same(before, snapshot(*objects))


@pytest.mark.parametrize("name", FILES[:4])
def test_an_accelerate_style_checkpoint_is_read_whole_before_anything_changes(
    tmp_path: Path, name: str
) -> None:
    # No manifest (as Accelerate writes them): a truncated file is found by reading it.
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    (tmp_path / "ckpt" / MANIFEST).unlink()
    step(acc, *objects[:3])
    before = snapshot(*objects)
    _truncate(tmp_path / "ckpt" / name)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        acc.load_state(tmp_path / "ckpt")
    assert same(before, snapshot(*objects))


def test_a_checkpoint_of_another_model_fails_naming_the_file(tmp_path: Path) -> None:
    acc = make()
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    other = make()
    model = other.prepare(torch.nn.Linear(4, 3))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not fit the model.*shape"):
        other.load_state(tmp_path / "ckpt")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())


def test_a_state_torch_would_refuse_fails_at_save_naming_its_owner(tmp_path: Path) -> None:
    acc = make()
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    saved = read_manifest(tmp_path / "ckpt")

    class Opaque:
        def state_dict(self) -> dict[str, Any]:
            return {"thing": Counter()}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            pass

    acc.register_for_checkpointing(Opaque())
    with pytest.raises(CheckpointError, match=r"registered object 1 \(Opaque\).*weights_only"):
        acc.save_state(tmp_path / "ckpt")
    # The previous checkpoint is untouched, and no temporary folder is left behind.
    assert read_manifest(tmp_path / "ckpt") == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_an_optimizer_state_that_cannot_be_written_fails_the_save_and_keeps_the_last(
    tmp_path: Path,
) -> None:
    # What goes wrong writing an optimizer's state is raised by save_state, after every thread
    # of the save (the large files' syncs) has stopped touching the folder.
    acc = make()
    _, optimizer, _, _ = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    saved = read_manifest(tmp_path / "ckpt")
    optimizer.optimizer.state[next(iter(optimizer.optimizer.state))]["hook"] = lambda: None
    with pytest.raises(CheckpointError, match=r"optimizer\.bin cannot be saved \(.*pickle"):
        acc.save_state(tmp_path / "ckpt")
    assert read_manifest(tmp_path / "ckpt") == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


# -- handlers added and removed since the save ------------------------------------------------


def test_a_handler_added_since_the_save_starts_fresh_with_a_warning(tmp_path: Path) -> None:
    acc = make()
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    later = make(mixed_precision="fp16")  # the scaler handler now saves state
    model, _optimizer, _scheduler, counter = trained(later, seed=1)
    scale = later.scaler.get_scale()
    with pytest.warns(CheckpointWarning, match="handler 'scale' has no state in this checkpoint"):
        later.load_state(tmp_path / "ckpt")
    assert counter.n == 7 and later.scaler.get_scale() == scale
    assert all(
        torch.equal(v, acc.get_state_dict(acc._prepared.models[0][0])[k])
        for k, v in later.get_state_dict(model).items()
    )


def test_state_of_a_handler_removed_since_the_save_is_reported_and_left_alone(
    tmp_path: Path,
) -> None:
    acc = make(mixed_precision="fp16")
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "scale.pt").is_file()
    later = make()
    trained(later, seed=1)
    with pytest.warns(
        CheckpointWarning, match="state of handler 'scale', which is not in this run"
    ):
        later.load_state(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "scale.pt").is_file()


# -- saves that replace, refuse, clean up ----------------------------------------------------


def test_saving_over_a_checkpoint_replaces_it_whole(tmp_path: Path) -> None:
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt", safe_serialization=False)
    assert (tmp_path / "ckpt" / "pytorch_model.bin").is_file()
    acc.save_state(tmp_path / "ckpt")
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert "pytorch_model.bin" not in names and "model.safetensors" in names
    manifest = read_manifest(tmp_path / "ckpt")
    assert manifest is not None and sorted([*manifest.files, MANIFEST]) == names
    assert manifest.world_size == 1 and manifest.step == 0
    weights = load_file(tmp_path / "ckpt" / "model.safetensors")
    assert all(torch.equal(v, objects[0].state_dict()[k]) for k, v in weights.items())


def test_a_users_own_files_in_the_folder_survive_saves_and_loads(tmp_path: Path) -> None:
    # Accelerate leaves a folder's other files alone; so does save_state: it replaces only
    # the files a checkpoint wrote (those its manifest lists, or Accelerate's layout).
    out = tmp_path / "out"
    out.mkdir()
    mine = {"best_model.pt": b"weights of my own", "notes.txt": b"mine", "logs/run.txt": b"log"}
    (out / "logs").mkdir()
    (out / "empty").mkdir()
    for name, data in mine.items():
        (out / name).write_bytes(data)
    # A folder Accelerate wrote: its random_states_0.pkl is replaced, its other names kept.
    (out / "random_states_0.pkl").write_bytes(b"accelerate's")
    (out / "optimizer_1.bin").write_bytes(b"a second optimizer's")
    acc = make()
    objects = trained(acc)
    acc.save_state(out)
    saved = snapshot(*objects)
    step(acc, *objects[:3])
    objects[3].n = 9
    acc.save_state(out)  # over a checkpoint of ours: its manifest says what it owns
    second = snapshot(*objects)
    acc.save_state(out)
    for name, data in mine.items():
        assert (out / name).read_bytes() == data, name
    assert (out / "empty").is_dir()
    assert (out / "optimizer_1.bin").read_bytes() == b"a second optimizer's"
    manifest = read_manifest(out)
    assert manifest is not None
    assert not {"best_model.pt", "notes.txt", "logs/run.txt", "optimizer_1.bin"} & set(
        manifest.files
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    step(acc, *objects[:3])
    acc.load_state(out)
    assert same(snapshot(*objects), second) and not same(second, saved)
    fresh = make()
    fresh_objects = trained(fresh, seed=1)
    fresh.load_state(out)
    assert snapshot(*fresh_objects)["weights"].keys() == second["weights"].keys()
    assert all(
        torch.equal(snapshot(*fresh_objects)["weights"][k], second["weights"][k])
        for k in second["weights"]
    )


def test_a_users_file_named_as_a_new_checkpoint_file_is_refused_and_kept(tmp_path: Path) -> None:
    # A file the manifest does not list is the user's, even under a checkpoint's name: the
    # save that would write that name is refused, naming it, and the folder is unchanged.
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "out")
    manifest = read_manifest(tmp_path / "out")
    assert manifest is not None
    (tmp_path / "out" / "scheduler_1.bin").write_bytes(b"mine")
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "out").iterdir())
    acc.prepare(torch.optim.lr_scheduler.StepLR(objects[1], step_size=1))
    with pytest.raises(CheckpointError, match=r"scheduler_1\.bin is not part of the checkpoint"):
        acc.save_state(tmp_path / "out")
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / "out").iterdir()) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    with pytest.raises(CheckpointError, match="is a file"):
        acc.save_state(tmp_path / "out" / "scheduler_1.bin")


def test_a_temporary_left_by_a_killed_save_is_removed_by_the_next(tmp_path: Path) -> None:
    stale = atomic_folders.temporary_of(tmp_path / "other", "4242-deadbeef")
    stale.mkdir()
    (stale / "optimizer.bin").write_bytes(b"half")
    legacy = tmp_path / ".ckpt.accelkw-tmp"  # as accelkw 0.2 named them
    legacy.mkdir()
    # A file that looks like a temporary is not one of ours: the sweep leaves it.
    (tmp_path / ".notes.accelkw-tmp").write_text("mine")
    acc = make()
    trained(acc)
    with pytest.warns(CheckpointWarning, match=r"removed \.other\.4242-deadbeef\.accelkw-tmp"):
        acc.save_state(tmp_path / "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.accelkw-tmp", "ckpt"]


@pytest.mark.parametrize("new_complete", [True, False], ids=["finish", "undo"])
def test_a_commit_cut_between_its_two_renames_is_finished_or_undone(
    tmp_path: Path, new_complete: bool
) -> None:
    # The fallback commit (no atomic exchange) renames the old folder aside, then the new one
    # into place; a crash between the two leaves no folder under the name.
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    old = snapshot(*objects)
    step(acc, *objects[:3])
    objects[3].n = 8
    acc.save_state(tmp_path / "next")
    new = snapshot(*objects)
    os.rename(tmp_path / "ckpt", atomic_folders.aside_of(tmp_path / "ckpt"))
    temporary = atomic_folders.temporary_of(tmp_path / "ckpt", "4242-deadbeef")
    os.rename(tmp_path / "next", temporary)
    if not new_complete:
        (temporary / MANIFEST).unlink()
    step(acc, *objects[:3])
    acc.load_state(tmp_path / "ckpt")
    assert same(new if new_complete else old, snapshot(*objects))
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["ckpt"] if new_complete else [temporary.name, "ckpt"]
    )


# -- ProjectConfiguration ---------------------------------------------------------------------


def test_automatic_naming_continues_after_a_restart_and_keeps_total_limit(
    tmp_path: Path,
) -> None:
    def run() -> tuple[Accelerator, tuple[Any, ...]]:
        config = ProjectConfiguration(
            project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2
        )
        acc = make(project_config=config)
        return acc, trained(acc)

    acc, objects = run()
    assert acc.project_dir == acc.logging_dir == str(tmp_path)
    for _ in range(3):
        acc.save_state()
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint_1", "checkpoint_2"]
    assert acc.save_iteration == 3
    # A restart with a fresh configuration (iteration 0) continues after the newest folder.
    acc, objects = run()
    objects[3].n = 42
    saved = acc.save_state()
    assert saved == folder / "checkpoint_3" and acc.save_iteration == 4
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint_2", "checkpoint_3"]
    objects[3].n = 0
    acc.load_state()
    assert objects[3].n == 42
    # The newest is damaged (a file lost): load_state() falls back to the newest complete one.
    (folder / "checkpoint_3" / "optimizer.bin").unlink()
    with pytest.warns(CheckpointWarning, match="skipping .*checkpoint_3, which is incomplete"):
        acc.load_state()
    assert objects[3].n == 7


def test_project_configuration_is_checked_and_needs_a_folder_to_name_into(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="total_limit: got 0, expected an integer >= 1"):
        ProjectConfiguration(total_limit=0)
    with pytest.raises(ConfigError, match="iteration: got -1"):
        ProjectConfiguration(iteration=-1)
    acc = make(project_config=ProjectConfiguration(automatic_checkpoint_naming=True))
    with pytest.raises(ConfigError, match="project_dir: got None"):
        acc.save_state()
    acc = make(
        project_dir=tmp_path, project_config=ProjectConfiguration(automatic_checkpoint_naming=True)
    )
    with pytest.raises(CheckpointNotFoundError, match="holds no complete checkpoint"):
        acc.load_state()
    with pytest.raises(FileNotFoundError):  # Accelerate raises for a missing folder too
        acc.load_state(tmp_path / "missing")


# -- kills -----------------------------------------------------------------------------------


def _surviving(run_dir: Path) -> str:
    """Which save the checkpoint holds, after checking every file against its manifest."""
    folder = run_dir / "ckpt"
    manifest = read_manifest(folder)
    assert manifest is not None, f"{folder} has no manifest: {sorted(os.listdir(folder))}"
    for name in manifest.files:
        manifest.check(folder, name, (folder / name).read_bytes())
    weights = {
        k.removeprefix("module."): v for k, v in load_file(folder / "model.safetensors").items()
    }
    for which in ("first", "second"):
        expected = torch.load(run_dir / f"{which}.pt", weights_only=True)
        expected = {k.removeprefix("module."): v for k, v in expected.items()}
        if all(torch.equal(weights[k], v) for k, v in expected.items()):
            return which
    raise AssertionError("the checkpoint holds neither the first nor the second save")


def _script(run_dir: Path, moment: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["OMP_NUM_THREADS"] = "1"
    script = str(ROOT / "tests" / "checkpoint_workers.py")
    return subprocess.Popen(
        [sys.executable, script, str(run_dir), moment, *extra],
        cwd=run_dir,
        env=env,
    )


@pytest.mark.parametrize(
    ("moment", "survivor"),
    [
        ("object", "first"),  # files half written
        ("rename-1", "first"),  # the old folder not yet moved aside
        ("rename-2", "second"),  # old aside, new not yet in place: recovery finishes the commit
        ("commit", "second"),
    ],
)
def test_a_save_killed_at_a_chosen_moment_leaves_a_whole_checkpoint(
    tmp_path: Path, moment: str, survivor: str
) -> None:
    proc = _script(tmp_path, moment)
    code = proc.wait(timeout=120)
    assert code == -signal.SIGKILL
    # The next run's load finds it whole (recovering an interrupted commit first).
    acc = make()
    model = acc.prepare(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)))
    acc.register_for_checkpointing(workers.Tripwire())
    acc.prepare(torch.optim.Adam(model.parameters(), lr=0.01))
    acc.load_state(tmp_path / "ckpt")
    assert _surviving(tmp_path) == survivor


def test_a_save_killed_after_any_delay_leaves_the_old_or_the_new_checkpoint(
    tmp_path: Path,
) -> None:
    seen = []
    for i, delay in enumerate((0.005, 0.02, 0.06)):
        run_dir = tmp_path / str(i)
        run_dir.mkdir()
        proc = _script(run_dir, "timed")
        while not (run_dir / "saving").exists() and proc.poll() is None:
            time.sleep(0.001)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        atomic_folders.recover(run_dir / "ckpt", lambda p: (p / MANIFEST).exists())
        seen.append(_surviving(run_dir))
    assert set(seen) <= {"first", "second"}


@pytest.mark.multiprocess
@pytest.mark.parametrize(("victim", "moment"), [(1, "write"), (0, "rename-2"), (0, "commit")])
def test_two_processes_killed_during_a_save_leave_a_whole_checkpoint(
    tmp_path: Path, victim: int, moment: str
) -> None:
    results = run_workers(
        workers.run,
        2,
        args=(str(tmp_path), moment, victim),
        timeout=120,
        allow_failures=True,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert any(isinstance(r, Exception) for r in results)
    if not (tmp_path / "ckpt").exists():
        atomic_folders.recover(tmp_path / "ckpt", lambda p: (p / MANIFEST).exists())
    # Rank 1 killed writing its own part: the main process committed the shared part without
    # waiting for it, and the folder holds no part of rank 1 for that save (read as missing).
    expected = {"write": "second", "rename-2": "second", "commit": "second"}[moment]
    assert _surviving(tmp_path) == expected
    manifest = read_manifest(tmp_path / "ckpt")
    assert manifest is not None and manifest.world_size == 2
    assert "random_states_0.pkl" in manifest.files
    if victim == 1:
        assert read_part(tmp_path / "ckpt", manifest, 1) is None


def _load_damaged(rank: int, run_dir: str) -> dict[str, Any]:
    acc, model, _optimizer, _tripwire = workers.build(rank, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        acc.load_state(Path(run_dir) / "ckpt")
    except CheckpointError as exc:
        error = str(exc)
    else:
        error = ""
    unchanged = all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    acc.end_training()
    return {"error": error, "unchanged": unchanged}


@pytest.mark.multiprocess
def test_a_file_one_process_reads_damaged_stops_every_process_before_any_change(
    tmp_path: Path,
) -> None:
    run_workers(workers.run, 2, args=(str(tmp_path), "none"), timeout=120)
    _truncate(tmp_path / "ckpt" / "random_states_1.pkl")
    r0, r1 = run_workers(_load_damaged, 2, args=(str(tmp_path),), timeout=120)
    assert "random_states_1.pkl is truncated" in r1["error"]
    assert "process 1" in r0["error"] and "random_states_1.pkl" in r0["error"]
    assert r0["unchanged"] and r1["unchanged"]


def _check_resumed_order(results: list[Any], stop_at: int, world_size: int) -> None:
    whole, stopped, resumed = results
    batches_per_epoch = 24 // 2 // world_size
    assert len(stopped["seen"]) == stop_at and stop_at <= batches_per_epoch * 2
    assert stopped["seen"] + resumed["seen"] == whole["seen"]
    assert whole["weights"] == resumed["weights"]


@pytest.mark.parametrize("stop_at", [4, 12], ids=["mid-epoch", "last-batch"])
def test_a_shuffled_run_resumed_mid_epoch_sees_the_same_batches(
    tmp_path: Path, stop_at: int
) -> None:
    results = [
        workers.shuffled_run(0, str(tmp_path), None, False),
        workers.shuffled_run(0, str(tmp_path), stop_at, False),
        workers.shuffled_run(0, str(tmp_path), None, True),
    ]
    _check_resumed_order(results, stop_at, 1)


# slow: the examples run resumes a 2-process shuffled run too (by_feature/checkpointing).
@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes_resumed_mid_epoch_see_the_same_batches(tmp_path: Path) -> None:
    env = {"OMP_NUM_THREADS": "1"}
    runs = [
        run_workers(workers.shuffled_run, 2, args=(str(tmp_path), stop, resume), env=env)
        for stop, resume in ((None, False), (2, False), (None, True))
    ]
    for rank in range(2):
        _check_resumed_order([run[rank] for run in runs], 2, 2)
