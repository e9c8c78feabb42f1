"""accelkw-mlflow: the contract, and runs read back with MlflowClient, matching Accelerate
1.15's MLflowTracker on one and two processes; the local store under the logging folder and
MLFLOW_TRACKING_URI honoured."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import mlflow_workers as workers
import pytest
from accelkw_mlflow import MLflowTracker, default_tracking_uri

from accelkw_core.testing import TrackerContract, run_workers

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


class TestMLflowContract(TrackerContract):
    tracker_class = MLflowTracker
    plugin_module = "accelkw_mlflow.plugin"
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


def read_run(uri: str, run_id: str) -> dict[str, Any]:
    """The run's experiment, params and metric histories, through MLflow's own client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    metrics = {
        key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        for key in run.data.metrics
    }
    return {
        "experiment": client.get_experiment(run.info.experiment_id).name,
        "params": run.data.params,
        "metrics": metrics,
        "status": run.info.status,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module's runs: creating one runs MLflow's migrations (seconds).

    Runs are told apart by their ids; a second run of one experiment name reuses it, in both
    trackers.
    """
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'shared.db'}"


def run(
    framework: str,
    root: Path,
    world_size: int,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> list[dict[str, Any]]:
    """The run on ``world_size`` processes; one process runs here (no spawn: seconds saved)."""
    if world_size == 1:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return [in_process(workers.tracking_run, framework, str(root), monkeypatch)]
    results: list[dict[str, Any]] = run_workers(
        workers.tracking_run, world_size, args=(framework, str(root)), env=env, timeout=300
    )
    return results


@pytest.mark.multiprocess
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_tracking_run_logs_what_accelerate_logs(
    tmp_path: Path, world_size: int, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Accelerate's tracker puts the store where MLflow's default is (the working directory):
    # both are given one explicitly (MLFLOW_TRACKING_URI, which both honour).
    env = {"MLFLOW_TRACKING_URI": store}
    ours = run("accelkw", tmp_path / "ours", world_size, env, monkeypatch)
    theirs = run("accelerate", tmp_path / "theirs", world_size, env, monkeypatch)
    assert ours[0]["run_id"] != theirs[0]["run_id"]
    read_ours = read_run(store, ours[0]["run_id"])
    read_theirs = read_run(store, theirs[0]["run_id"])
    assert read_ours == read_theirs
    assert read_ours["experiment"] == workers.PROJECT
    assert read_ours["params"] == {k: str(v) for k, v in workers.CONFIG.items()}
    steps = workers.EPOCHS * workers.STEPS
    assert [s for s, _ in read_ours["metrics"]["train_loss"]] == list(range(steps))
    assert read_ours["metrics"]["epoch"] == [(workers.STEPS, 0.0), (steps, 1.0)]
    assert "note" not in read_ours["metrics"]
    assert read_ours["status"] == "FINISHED"
    if world_size == 2:
        # Only the main process writes: rank 1's folder holds nothing, in both.
        assert ours[1]["files"] == theirs[1]["files"] == []
        assert ours[1]["run_id"] is None


def test_the_store_is_under_the_logging_folder_unless_a_uri_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (result,) = run("accelkw", tmp_path, 1, {}, monkeypatch)
    logs = tmp_path / "rank0"
    assert "mlflow.db" in result["files"]
    read = read_run(default_tracking_uri(logs), result["run_id"])
    assert read["metrics"]["train_loss"][0][0] == 0


def test_tracking_uri_from_the_environment_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    import mlflow

    uri = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    logs = tmp_path / "logs"
    tracker = MLflowTracker("honoured", logging_dir=str(logs))
    try:
        tracker.start()
        tracker.log({"loss": 0.5}, step=1)
        run_id = tracker.active_run.info.run_id if tracker.active_run else ""
    finally:
        tracker.finish()
        mlflow.set_tracking_uri(None)  # the next test starts from MLflow's default again
    assert not (logs / "mlflow.db").exists()
    assert read_run(uri, run_id)["metrics"] == {"loss": [(1, 0.5)]}


def test_environment_overrides_are_accelerates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    monkeypatch.setenv("MLFLOW_TAGS", '{"team": "a"}')
    monkeypatch.setenv("MLFLOW_NESTED_RUN", "yes")
    tracker = MLflowTracker("from-code", tags={"team": "b"})
    assert (tracker.experiment_name, tracker.tags, tracker.nested_run) == (
        "from-env",
        {"team": "a"},
        True,
    )
    monkeypatch.setenv("MLFLOW_NESTED_RUN", "maybe")
    with pytest.raises(ValueError, match="MLFLOW_NESTED_RUN: got 'maybe'"):
        MLflowTracker("x")
