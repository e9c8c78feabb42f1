"""The built-in tracker plugins installed together: ``log_with="all"`` writes to both, and
``accelkw plugins list`` shows them (a real listing and the kept one import no torch).

Integration tests: they import the tracker plugins directly, so a broken install fails them.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import accelkw_mlflow
import accelkw_tensorboard  # noqa: F401  (the distribution must be importable)
import pytest

from accelkw_core.testing import run_workers
from tests import tracking_workers as workers
from tests.conftest import run_python


@pytest.mark.multiprocess
def test_log_with_all_writes_to_every_installed_tracker(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (result,) = run_workers(workers.all_installed_run, 1, args=(str(tmp_path),), timeout=240)
    assert result["log_with"] == ["mlflow", "tensorboard"]
    assert result["trackers"] == ["MLflowTracker", "TensorBoardTracker"]
    events = EventAccumulator(str(tmp_path / "logs" / workers.PROJECT))
    events.Reload()
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("loss")] == [
        (0, 1.0),
        (1, 0.5),
        (2, 0.3333),
    ]
    client = MlflowClient(accelkw_mlflow.default_tracking_uri(tmp_path / "logs"))
    history = client.get_metric_history(result["run_id"], "loss")
    assert [(m.step, round(m.value, 4)) for m in history] == [(0, 1.0), (1, 0.5), (2, 0.3333)]
    assert client.get_run(result["run_id"]).data.params == {"lr": "0.5"}


LIST = """
    import contextlib, io, json, sys
    from accelkw_core.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plugins", "list", "--json", *sys.argv[1:]]) == 0
    print(json.dumps({
        "torch": "torch" in sys.modules,
        "loaded": "accelkw_core.discovery.registry" in sys.modules,
        "trackers": sorted(
            [t["name"], t["class"], p["distribution"], p["kinds"], p["status"]]
            for p in json.loads(out.getvalue()) for t in p["trackers"]
        ),
    }))
"""


def test_plugins_list_shows_the_trackers_without_importing_torch(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}

    def code(*args: str) -> str:
        return f"import sys\nsys.argv[1:] = {list(args)!r}\n" + textwrap.dedent(LIST)

    real = run_python(code("--refresh"), env=env)
    assert real.returncode == 0, real.stderr
    warm = run_python(code(), env=env)
    assert warm.returncode == 0, warm.stderr
    real_out, warm_out = json.loads(real.stdout), json.loads(warm.stdout)
    expected = [
        ["mlflow", "accelkw_mlflow.tracker.MLflowTracker", "accelkw-mlflow", ["tracker"], "loaded"],
        [
            "tensorboard",
            "accelkw_tensorboard.tracker.TensorBoardTracker",
            "accelkw-tensorboard",
            ["tracker"],
            "loaded",
        ],
    ]
    assert real_out["trackers"] == warm_out["trackers"] == expected
    assert real_out["loaded"] and not warm_out["loaded"], "the second listing was not kept"
    assert not real_out["torch"] and not warm_out["torch"]


def test_accelkw_env_shows_the_tracker_plugins_in_text_and_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from accelkw_core.cli.main import main
    from accelkw_core.discovery.default_registry import set_registry

    undo = set_registry(None)  # the installed plugins, as the command reads them
    try:
        assert main(["env"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert main(["env", "--json"]) == 0
        plugins = {p["name"]: p for p in json.loads(capsys.readouterr().out)["plugins"]}
    finally:
        undo()
    assert any(
        line.startswith("  accelkw-tensorboard ") and line.endswith("(trackers: tensorboard)")
        for line in lines
    ), lines
    assert any(line.endswith("(trackers: mlflow)") for line in lines), lines
    assert (plugins["tensorboard"]["handlers"], plugins["tensorboard"]["trackers"]) == (
        [],
        ["tensorboard"],
    )
    assert plugins["mlflow"]["trackers"] == ["mlflow"]
