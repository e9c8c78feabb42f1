"""accelkw-mlflow: the contract, and runs read back with MlflowClient, matching Accelerate
1.15's MLflowTracker on one and two processes; the local store under the logging folder and
MLFLOW_TRACKING_URI honoured."""

from __future__ import annotations

import os
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


def run(framework: str, root: Path, world_size: int, env: dict[str, str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = run_workers(
        workers.tracking_run, world_size, args=(framework, str(root)), env=env, timeout=300
    )
    return results


@pytest.mark.multiprocess
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_tracking_run_logs_what_accelerate_logs(
    tmp_path: Path, world_size: int, store: str
) -> None:
    # Accelerate's tracker puts the store where MLflow's default is (the working directory):
    # both are given one explicitly (MLFLOW_TRACKING_URI, which both honour).
    env = {"MLFLOW_TRACKING_URI": store}
    ours = run("accelkw", tmp_path / "ours", world_size, env)
    theirs = run("accelerate", tmp_path / "theirs", world_size, env)
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


@pytest.mark.multiprocess
def test_the_store_is_under_the_logging_folder_unless_a_uri_is_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    assert "MLFLOW_TRACKING_URI" not in env, "the test needs MLflow's default"
    (result,) = run("accelkw", tmp_path, 1, {})
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
