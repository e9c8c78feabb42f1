"""accelkw-tensorboard: the contract, and event files read back with TensorBoard's own reader,
matching Accelerate 1.15's TensorBoardTracker on one and two processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import tensorboard_workers as workers
import yaml
from accelkw_tensorboard import TensorBoardTracker

from accelkw_core.testing import TrackerContract, run_workers

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


class TestTensorBoardContract(TrackerContract):
    tracker_class = TensorBoardTracker
    plugin_module = "accelkw_tensorboard.plugin"
    pyproject: ClassVar[str | os.PathLike[str] | None] = PYPROJECT


def in_process(
    target: Any, framework: str, root: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """``target(0, framework, root)`` in this process, leaving no framework state behind."""
    monkeypatch.chdir(os.getcwd())  # the worker may change directory; put it back after
    reset = framework == "accelerate"
    if reset:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    try:
        result: dict[str, Any] = target(0, framework, root)
    finally:
        if reset:
            AcceleratorState._reset_state(reset_partial_state=True)
            GradientState._reset_state()
        if "mlflow" in sys.modules:
            sys.modules["mlflow"].set_tracking_uri(None)  # MLflow's default for the next run
    return result


def read_run(folder: Path) -> dict[str, Any]:
    """Scalars and texts of the event files directly in ``folder``, by TensorBoard's reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {
        tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in tags["scalars"]
    }
    texts = {
        tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in acc.Tensors(tag)]
        for tag in tags["tensors"]
    }
    return {"scalars": scalars, "texts": texts}


def read_hparams(folder: Path) -> list[dict[str, Any]]:
    """Every hparams.yml written under ``folder`` (Accelerate writes one per configuration)."""
    return [yaml.safe_load(p.read_text()) for p in sorted(folder.rglob("hparams.yml"))]


def run(
    framework: str, root: Path, world_size: int, monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, Any]]:
    """The run on ``world_size`` processes; one process runs here (no spawn: seconds saved)."""
    if world_size == 1:
        return [in_process(workers.tracking_run, framework, str(root), monkeypatch)]
    results: list[dict[str, Any]] = run_workers(
        workers.tracking_run, world_size, args=(framework, str(root)), timeout=240
    )
    return results


@pytest.mark.multiprocess
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_tracking_run_writes_what_accelerate_writes(
    tmp_path: Path, world_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = run("accelkw", tmp_path / "ours", world_size, monkeypatch)
    theirs = run("accelerate", tmp_path / "theirs", world_size, monkeypatch)
    run_ours = tmp_path / "ours" / "rank0" / workers.PROJECT
    run_theirs = tmp_path / "theirs" / "rank0" / workers.PROJECT
    read_ours, read_theirs = read_run(run_ours), read_run(run_theirs)
    assert read_ours == read_theirs
    steps = workers.EPOCHS * workers.STEPS
    assert [s for s, _ in read_ours["scalars"]["train_loss"]] == list(range(steps))
    assert read_ours["scalars"]["epoch"] == [(workers.STEPS, 0.0), (steps, 1.0)]
    assert read_ours["texts"]["note/text_summary"][-1][1] == b"epoch 1 done"
    assert read_hparams(run_ours) == read_hparams(run_theirs) == [workers.CONFIG]
    assert ours[0]["writer"] == theirs[0]["writer"] == "SummaryWriter"

    # The same files, by kind: the event file of the run and the hparams sub-run beside it.
    def kinds(files: list[str]) -> list[str]:
        return sorted(f.split(os.sep)[-1].split(".")[0] for f in files)

    assert kinds(ours[0]["files"]) == kinds(theirs[0]["files"])
    if world_size == 2:
        # Only the main process writes: rank 1's project folder holds nothing, in both.
        assert ours[1]["files"] == theirs[1]["files"] == []


def test_tensors_are_logged_as_numbers(tmp_path: Path) -> None:
    import torch

    tracker = TensorBoardTracker("run", str(tmp_path))
    tracker.start()
    tracker.log({"loss": torch.tensor(0.25), "pair": {"a": torch.tensor(1.0), "b": 2}}, step=3)
    tracker.finish()
    read = read_run(tmp_path / "run")
    assert read["scalars"]["loss"] == [(3, 0.25)]
    # add_scalars writes each member as its own run folder, as TensorBoard lays them out.
    assert read_run(tmp_path / "run" / "pair_a")["scalars"]["pair"] == [(3, 1.0)]


def test_log_before_start_names_the_missing_call(tmp_path: Path) -> None:
    tracker = TensorBoardTracker("run", str(tmp_path))
    with pytest.raises(RuntimeError, match="init_trackers"):
        tracker.log({"loss": 1.0})
