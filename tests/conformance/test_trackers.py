"""Trackers under Accelerate 1.15 and accelkw: where they differ, by design (docs/migrating.md).

The runs that agree (custom trackers, TensorBoard and MLflow files) are compared in
tests/test_tracking.py and in each tracker plugin's tests; these are the deliberate differences.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType

import accelkw_mlflow.plugin
import accelkw_tensorboard.plugin
import pytest

from accelkw_core import Accelerator
from accelkw_core.errors import ConfigError
from accelkw_core.testing import isolated_registry
from tests import tracking_workers as workers
from tests.conformance.differences import listed


def test_a_tracker_that_is_not_installed_is_refused_where_accelerate_logs_nothing(
    accelerate: ModuleType,
) -> None:
    import importlib.util

    assert importlib.util.find_spec("wandb") is None, "the test needs wandb absent"
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = accelerate.Accelerator(cpu=True, log_with="wandb")
    theirs.init_trackers("p")
    assert theirs.trackers == []
    assert any("no supported trackers are currently installed" in str(w.message) for w in caught)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()

    with pytest.raises(ConfigError, match=r"accelerator\.log_with: got 'wandb'"):
        Accelerator(cpu=True, log_with="wandb", registry=isolated_registry())
    listed("tracker-not-installed-refused")


def test_all_without_a_logging_folder_is_refused_at_construction(
    accelerate: ModuleType,
) -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    theirs = accelerate.Accelerator(cpu=True, log_with="all")  # accepted here ...
    with pytest.raises(TypeError):
        theirs.init_trackers("p")  # ... and fails inside TensorBoardTracker
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()

    registry = isolated_registry([accelkw_tensorboard.plugin, accelkw_mlflow.plugin])
    with pytest.raises(ConfigError, match="'tensorboard' tracker writes files"):
        Accelerator(cpu=True, log_with="all", registry=registry)
    listed("tracker-logging-dir-checked-for-all")


def test_mlflow_keeps_its_store_under_the_logging_folder(
    accelerate: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow
    from accelerate.state import AcceleratorState, GradientState

    monkeypatch.chdir(tmp_path)  # the runs change directory; put it back after
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ours = workers.mlflow_default_store(0, "accelkw", str(tmp_path / "ours"))
    mlflow.set_tracking_uri(None)  # back to MLflow's default, which Accelerate's run uses
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    try:
        theirs = workers.mlflow_default_store(0, "accelerate", str(tmp_path / "theirs"))
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        mlflow.set_tracking_uri(None)
    assert "logs/mlflow.db" in ours and "mlflow.db" not in ours
    assert "mlflow.db" in theirs and "logs/mlflow.db" not in theirs
    listed("mlflow-store-under-logging-dir")
