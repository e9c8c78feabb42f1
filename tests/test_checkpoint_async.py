"""Asynchronous saves (accelkw-async-checkpoint) keep every promise of a synchronous save.

Real SIGKILLs of real processes (one, and two over gloo) while the background thread writes,
agrees or commits, and (FSDP2) inside DCP's ``async_save`` writes; a full disk injected at the
write layer (``durable.open_new``) and a folder made unwritable under the writer (a real
``EACCES``), each raised at the next call; resumes compared bit for bit; the
files compared with a synchronous save's.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from accelkw_async_checkpoint import AsyncCheckpointKwargs

from accelkw_core import Accelerator, CheckpointError
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.manifest import MANIFEST, read_manifest
from accelkw_core.testing import isolated_registry, plugin_of, run_workers
from tests import checkpoint_workers as workers
from tests.runtime_helpers import ScaleKwargs
from tests.test_checkpoint_faults import _Full
from tests.test_checkpoints import _script, _surviving, same, snapshot, step, trained


def make_async(max_pending: int = 1) -> Accelerator:
    registry = isolated_registry([plugin_of(ScaleKwargs, AsyncCheckpointKwargs)])
    return Accelerator(
        cpu=True, registry=registry, kwargs_handlers=[AsyncCheckpointKwargs(max_pending)]
    )


def make_sync() -> Accelerator:
    return Accelerator(cpu=True, registry=isolated_registry([plugin_of(ScaleKwargs)]))


def test_installed_but_not_asked_for_it_changes_nothing() -> None:
    registry = isolated_registry([plugin_of(ScaleKwargs, AsyncCheckpointKwargs)])
    acc = Accelerator(cpu=True, registry=registry)
    assert "async_checkpoint" not in acc.state.handlers
    acc.wait_for_checkpoints()  # nothing to wait for
    acc.end_training()


def test_the_files_are_a_synchronous_saves_and_training_on_does_not_change_them(
    tmp_path: Path,
) -> None:
    acc = make_async()
    objects = trained(acc)
    before = snapshot(*objects)
    rng = torch.get_rng_state()
    # The same state saved synchronously, for comparison (a plain run with the same objects).
    sync = make_sync()
    trained(sync)
    torch.set_rng_state(rng)
    sync.save_state(tmp_path / "sync")
    torch.set_rng_state(rng)
    acc.save_state(tmp_path / "async")  # returns once staged
    for _ in range(3):  # the parameters and Adam's moments change in place meanwhile
        step(acc, *objects[:3])
    objects[3].n = 99
    acc.wait_for_checkpoints()
    a, s = read_manifest(tmp_path / "async"), read_manifest(tmp_path / "sync")
    assert a is not None and s is not None and a.files == s.files  # byte for byte (XXH3)
    # And it loads back the state as it was when save_state returned.
    acc.load_state(tmp_path / "async")
    assert same(before, snapshot(*objects))
    acc.end_training()
    sync.end_training()


def _run(acc: Accelerator, steps: int, save_at: int | None, folder: Path) -> dict[str, Any]:
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = acc.prepare(model, optimizer)
    start = 0
    if save_at is None and (folder / MANIFEST).exists():
        acc.load_state(folder)
        start = acc.step
    for i in range(start, steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        acc.step = i + 1
        if save_at is not None and i + 1 == save_at:
            acc.save_state(folder)
    acc.end_training()
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a_resume_from_an_async_checkpoint_is_bit_identical(tmp_path: Path) -> None:
    whole = _run(make_async(), 8, 4, tmp_path / "ckpt")
    resumed = _run(make_async(), 8, None, tmp_path / "ckpt")
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


@pytest.mark.parametrize("call", ["save_state", "load_state", "wait_for_everyone", "end_training"])
def test_a_background_failure_is_raised_at_the_next_call_and_the_last_checkpoint_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    acc = make_async()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    acc.wait_for_checkpoints()
    kept = read_manifest(tmp_path / "ckpt")
    real_open = atomic_folders.open_new

    def open_new(path: Path) -> Any:
        fh = real_open(path)
        return _Full(fh, 0) if path.name == "optimizer.bin" else fh  # full at once

    monkeypatch.setattr(atomic_folders, "open_new", open_new)
    step(acc, *objects[:3])
    acc.save_state(tmp_path / "ckpt")  # staged: the failure comes from the thread
    with pytest.raises(CheckpointError) as caught:
        if call == "save_state":
            acc.save_state(tmp_path / "other")
        elif call == "load_state":
            acc.load_state(tmp_path / "ckpt")
        else:
            getattr(acc, call)()
    message = str(caught.value)
    assert "\n" not in message and "optimizer.bin" in message and "no space left" in message
    monkeypatch.undo()
    assert read_manifest(tmp_path / "ckpt") == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary, no "other"
    acc.wait_for_checkpoints()  # raised once
    acc.load_state(tmp_path / "ckpt")
    acc.end_training()


def test_a_folder_made_unwritable_under_a_background_save_is_raised_at_the_next_call(
    tmp_path: Path,
) -> None:
    # A real EACCES from the file system: the save's temporary folder turns read-only as the
    # background thread opens its first file. As root, the saves run as nobody, whose
    # permissions bind (after a first save as root, so nothing is left to import from root's
    # folders).
    place = tmp_path / "shared"
    place.mkdir()
    acc = make_async()
    objects = trained(acc)
    acc.save_state(tmp_path / "warm")
    acc.wait_for_checkpoints()
    real_open = atomic_folders.open_new
    locked: list[Path] = []

    def open_new(path: Path) -> Any:
        if not locked:
            locked.append(path.parent)
            os.chmod(path.parent, 0o555)
        return real_open(path)

    as_root = os.geteuid() == 0
    if as_root:
        for folder in (tmp_path, *tmp_path.parents):
            if folder != Path("/"):
                os.chmod(folder, os.stat(folder).st_mode | 0o011)  # others may pass through
        os.chown(place, 65534, 65534)
    try:
        if as_root:
            os.seteuid(65534)
        acc.save_state(place / "ckpt")
        acc.wait_for_checkpoints()
        kept = read_manifest(place / "ckpt")
        step(acc, *objects[:3])
        atomic_folders.open_new = open_new  # type: ignore[assignment]
        acc.save_state(place / "ckpt")  # staged: the failure comes from the thread
        with pytest.raises(CheckpointError) as caught:
            acc.wait_for_everyone()
    finally:
        atomic_folders.open_new = real_open
        if as_root:
            os.seteuid(0)
        for folder in locked:
            if folder.exists():
                os.chmod(folder, 0o755)
    message = str(caught.value)
    assert "\n" not in message and "ckpt was not saved" in message
    assert "cannot be saved" in message and "Permission denied" in message  # names the file
    assert read_manifest(place / "ckpt") == kept
    acc.wait_for_checkpoints()  # raised once
    acc.load_state(place / "ckpt")  # the last good checkpoint, whole
    acc.save_state(place / "ckpt")  # writable again: the next save commits
    acc.wait_for_checkpoints()
    assert sorted(p.name for p in place.iterdir()) == ["ckpt"]  # no temporary, no lock
    acc.end_training()


def test_total_limit_removes_old_checkpoints_only_after_the_commit(tmp_path: Path) -> None:
    from accelkw_core import ProjectConfiguration

    config = ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2
    )
    registry = isolated_registry([plugin_of(ScaleKwargs, AsyncCheckpointKwargs)])
    acc = Accelerator(
        cpu=True,
        registry=registry,
        project_config=config,
        kwargs_handlers=[AsyncCheckpointKwargs(max_pending=2)],
    )
    objects = trained(acc)
    for _ in range(4):
        acc.save_state()
        step(acc, *objects[:3])
    acc.wait_for_checkpoints()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["checkpoint_2", "checkpoint_3"]
    acc.end_training()


@pytest.mark.parametrize(
    ("moment", "survivor"),
    [
        ("write", "first"),
        ("exchange-1", "first"),  # entering the agreement on the files: no manifest yet
        ("commit", "second"),  # on one process, the same instant as exchange-2
    ],
)
def test_a_background_save_killed_leaves_a_whole_checkpoint(
    tmp_path: Path, moment: str, survivor: str
) -> None:
    proc = _script(tmp_path, moment, "async")
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert _surviving(tmp_path) == survivor
    _loads(tmp_path / "ckpt")


def _loads(folder: Path) -> None:
    """``folder`` loads into the workers' objects, on one process."""
    acc = make_sync()
    model = acc.prepare(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)))
    acc.register_for_checkpointing(workers.Tripwire())
    acc.prepare(torch.optim.Adam(model.parameters(), lr=0.01))
    acc.load_state(folder)
    acc.end_training()


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    ("victim", "moment"),
    [
        # Rank 1 dies writing its own part: rank 0 commits the shared part without it (a save
        # of replicated state has no agreement between the processes to die in).
        (1, "write"),
        # Rank 0 dies once its files are written, before the manifest and the commit.
        (0, "exchanged-1"),
        (0, "commit"),
    ],
)
def test_two_processes_killed_during_a_background_save_leave_a_whole_checkpoint(
    tmp_path: Path, victim: int, moment: str
) -> None:
    results = run_workers(
        workers.run,
        2,
        args=(str(tmp_path), moment, victim, True),
        timeout=120,
        allow_failures=True,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert any(isinstance(r, Exception) for r in results)
    expected = "first" if moment == "exchanged-1" else "second"
    assert _surviving(tmp_path) == expected
    manifest = read_manifest(tmp_path / "ckpt")
    assert manifest is not None and manifest.world_size == 2
    _loads(tmp_path / "ckpt")


@pytest.mark.multiprocess
def test_two_processes_resume_from_an_async_checkpoint_bit_for_bit(tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    env = {"OMP_NUM_THREADS": "1"}
    whole = run_workers(workers.async_resume, 2, args=(folder, False), timeout=120, env=env)
    resumed = run_workers(workers.async_resume, 2, args=(folder, True), timeout=120, env=env)
    assert whole == resumed
    assert whole[0] == whole[1]  # DDP kept the processes' weights equal


@pytest.mark.multiprocess
def test_fsdp2_sharded_state_goes_through_dcp_async_save_and_a_kill_in_it_keeps_the_last(
    tmp_path: Path,
) -> None:
    # Rank 0 (DCP's coordinator) dies inside the background DCP writes of the second save:
    # the model's shards written by async_save, the optimizer's not yet.
    env = {"OMP_NUM_THREADS": "1"}
    killed = run_workers(
        workers.fsdp_async_killed,
        2,
        args=(str(tmp_path), 0),
        timeout=120,
        allow_failures=True,
        env=env,
    )
    assert any(isinstance(r, Exception) for r in killed)
    # Killed there: the save's temporary folder holds the model's DCP checkpoint, whole, and
    # not the optimizer's.
    (temporary,) = tmp_path.glob(f".ckpt.*{atomic_folders.TMP_SUFFIX}")
    assert (temporary / "pytorch_model_fsdp_0" / ".metadata").is_file()
    assert not (temporary / "optimizer_0" / ".metadata").exists()
    manifest = read_manifest(tmp_path / "ckpt")
    assert manifest is not None and manifest.world_size == 2
    for name in manifest.files:
        manifest.check(tmp_path / "ckpt", name, (tmp_path / "ckpt" / name).read_bytes())
    # A new run loads what survived (the first save), saves in the background and trains on
    # while DCP writes; a fresh model loads that save and ends where the run did, bit for bit.
    results = run_workers(workers.fsdp_async_resume, 2, args=(str(tmp_path),), timeout=120, env=env)
    for result in results:
        assert result["survived"]
        assert result["async_saves"] == 2  # the model's shards and the optimizer's
        assert result["resumed"] == result["whole"]
    shards = [".metadata", "__0_0.distcp", "__1_0.distcp"]
    expected = [f"{d}/{f}" for d in ("optimizer_0", "pytorch_model_fsdp_0") for f in shards]
    expected += [MANIFEST, "random_states_0.pkl", "random_states_1.pkl"]
    assert results[0]["files"] == sorted(expected)  # a synchronous save's layout
