"""Checkpoints at their edges: the working directory as the folder, a user's file written while
a background save commits, and errors quoted from another process or a background save.

Real files and saves; the background commit is paused at its rename (the exchange of the two
folders) by wrapping accelkw's own function, while the test writes into the folder as a user
would, then let go on.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from accelkw_async_checkpoint import AsyncCheckpointKwargs

from accelkw_core import Accelerator, CheckpointError
from accelkw_core.errors import quoted
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.agreement import raise_agreed
from accelkw_core.runtime.checkpoints.manifest import read_manifest
from accelkw_core.testing import isolated_registry, plugin_of
from tests.runtime_helpers import ScaleKwargs
from tests.test_checkpoints import make, same, snapshot, step, trained


@pytest.mark.parametrize("name", [".", "sub/..", "/"])
def test_the_working_directory_or_the_root_as_the_folder_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "train.py").write_text("print('the user's script')\n")
    acc = make()
    trained(acc)
    with pytest.raises(CheckpointError) as caught:
        acc.save_state(name)
    message = str(caught.value)
    assert "\n" not in message and message.count("checkpoint:") == 1
    if name == "/":
        assert "root of the file system" in message
    else:
        assert "is the working directory" in message and "save into a sub-folder" in message
    # Nothing was written or moved: the working directory is as the user left it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub", "train.py"]
    assert Path.cwd() == tmp_path
    acc.end_training()


def test_a_name_ending_in_dotdot_saves_into_the_folder_it_stands_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "x").mkdir(parents=True)
    acc = make()
    objects = trained(acc)
    saved = snapshot(*objects)
    assert acc.save_state("runs/x/..") == tmp_path / "runs"
    assert read_manifest(tmp_path / "runs") is not None
    assert (tmp_path / "runs" / "x").is_dir()  # the folder's own sub-folder kept
    step(acc, *objects[:3])
    acc.load_state("runs")
    assert same(saved, snapshot(*objects))
    acc.end_training()


def _paused_exchange(
    monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> tuple[threading.Event, threading.Event]:
    """Pause the commit's rename into place until the test says go; ``atomic``: the swap
    (``renameat2``), else the fallback's two renames."""
    real: Callable[[Path, Path], bool] = atomic_folders._exchange
    reached, go = threading.Event(), threading.Event()

    def exchange(a: Path, b: Path) -> bool:
        reached.set()
        assert go.wait(60)
        return real(a, b) if atomic else False

    monkeypatch.setattr(atomic_folders, "_exchange", exchange)
    return reached, go


@pytest.mark.parametrize("atomic", [True, False], ids=["exchange", "two-renames"])
def test_files_a_user_writes_into_the_folder_while_a_background_save_commits_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    registry = isolated_registry([plugin_of(ScaleKwargs, AsyncCheckpointKwargs)])
    acc = Accelerator(cpu=True, registry=registry, kwargs_handlers=[AsyncCheckpointKwargs()])
    objects = trained(acc)
    folder = tmp_path / "ckpt"
    acc.save_state(folder)
    acc.wait_for_checkpoints()
    (folder / "notes.txt").write_text("written before the save\n")
    step(acc, *objects[:3])
    saved = snapshot(*objects)
    reached, go = _paused_exchange(monkeypatch, atomic)
    acc.save_state(folder)  # staged; the background thread commits it
    assert reached.wait(60), "the commit never reached its rename"
    # The user writes beside the checkpoint while the commit runs: a new file, a new folder.
    (folder / "eval.json").write_text('{"loss": 0.5}\n')
    (folder / "samples").mkdir()
    (folder / "samples" / "0.txt").write_text("a sample\n")
    go.set()
    acc.wait_for_checkpoints()
    assert (folder / "eval.json").read_text() == '{"loss": 0.5}\n'
    assert (folder / "samples" / "0.txt").read_text() == "a sample\n"
    assert (folder / "notes.txt").read_text() == "written before the save\n"
    manifest = read_manifest(folder)
    assert manifest is not None and "eval.json" not in manifest.files
    assert not list(tmp_path.glob(f".*{atomic_folders.TMP_SUFFIX}"))
    assert not list(tmp_path.glob(f".*{atomic_folders.OLD_SUFFIX}"))
    step(acc, *objects[:3])
    acc.load_state(folder)
    assert same(saved, snapshot(*objects))
    acc.end_training()


def test_an_error_quoted_from_another_process_or_a_background_save_has_one_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process's failure, as the processes' agreement reports it.
    theirs = CheckpointError(tmp_path / "ckpt" / "optimizer.bin", "is truncated: 3 bytes")
    with pytest.raises(CheckpointError) as caught:
        raise_agreed(None, [(1, quoted(theirs))])
    assert str(caught.value) == (
        f"checkpoint: (process 1) failed: {tmp_path}/ckpt/optimizer.bin is truncated: 3 bytes"
    )
    assert quoted(ValueError("plain")) == "plain"
    # A background save that fails: its error is raised at the next call, one prefix.
    registry = isolated_registry([plugin_of(ScaleKwargs, AsyncCheckpointKwargs)])
    acc = Accelerator(cpu=True, registry=registry, kwargs_handlers=[AsyncCheckpointKwargs()])
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    acc.wait_for_checkpoints()

    def broken(a: Path, b: Path) -> bool:
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(a))

    monkeypatch.setattr(atomic_folders, "_exchange", broken)
    acc.save_state(tmp_path / "ckpt")  # over the first: its commit's swap fails
    with pytest.raises(CheckpointError) as failed:
        acc.wait_for_checkpoints()
    assert str(failed.value).count("checkpoint:") == 1, str(failed.value)
    assert "was not saved" in str(failed.value)
    acc.end_training()


def test_weights_of_another_kind_of_dtype_are_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    import torch

    def model(dtype: torch.dtype) -> torch.nn.Module:
        module = torch.nn.Linear(3, 2)
        module.register_buffer("counts", torch.arange(4).to(dtype))
        return module

    acc = make()
    torch.manual_seed(0)
    acc.prepare(model(torch.int64))
    acc.save_state(tmp_path / "ints")
    acc.end_training()
    later = make()
    torch.manual_seed(1)
    floats = later.prepare(model(torch.float32))
    before = {k: v.clone() for k, v in floats.state_dict().items()}
    with pytest.raises(CheckpointError) as caught:
        later.load_state(tmp_path / "ints")
    message = str(caught.value)
    assert "\n" not in message and "counts holds I64 (integer)" in message
    assert "torch.float32 (float)" in message
    assert all(torch.equal(before[k], v) for k, v in floats.state_dict().items())
    later.end_training()
