"""``MLflowTracker``: Accelerate's MLflow tracker, with a local store under the logging folder.

Accelerate 1.15's ``MLflowTracker``, method for method (experiment looked up by name or
created, ``mlflow.start_run``, params in batches of MLflow's limit, numeric metrics only,
``mlflow.end_run``), and the same environment overrides (``MLFLOW_EXPERIMENT_NAME``,
``MLFLOW_RUN_ID``, ``MLFLOW_TAGS``, ``MLFLOW_NESTED_RUN``). One addition: when no tracking URI
is set (neither ``MLFLOW_TRACKING_URI`` nor ``mlflow.set_tracking_uri``) and the run has a
logging folder (``Accelerator(project_dir=...)``), the store is
``sqlite:///<logging_dir>/mlflow.db`` rather than ``mlflow.db`` in the working directory.
mlflow is imported in the methods, so importing the plugin loads neither it nor torch.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from accelkw_core.tracking import GeneralTracker, on_main_process

if TYPE_CHECKING:
    import mlflow

__all__ = ["MLflowTracker", "default_tracking_uri"]

logger = logging.getLogger("accelkw.mlflow")

_TRUE = ("1", "true", "yes", "y", "on", "t")
_FALSE = ("0", "false", "no", "n", "off", "f")


def default_tracking_uri(logging_dir: str | os.PathLike[str]) -> str:
    """The local store the tracker uses under ``logging_dir``: a SQLite database file there."""
    path = os.path.abspath(os.path.join(os.fspath(logging_dir), "mlflow.db"))
    return f"sqlite:///{path}"


def _nested_from_env(value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    from accelkw_core.errors import ConfigError

    raise ConfigError("mlflow", "MLFLOW_NESTED_RUN", value, "true or false (1/0, yes/no)")


class MLflowTracker(GeneralTracker):
    """Log a run's params and metrics with MLflow's tracking API (``mlflow.log_metrics``, ...).

    ``experiment_name`` is the project name ``init_trackers`` got; ``logging_dir`` is the
    experiment's artifact location and, when no tracking URI is set, the folder of the local
    store. ``run_id``, ``tags`` (a dict, or its JSON), ``nested_run``, ``run_name`` and
    ``description`` are ``mlflow.start_run``'s. The ``MLFLOW_*`` variables above win over
    the arguments, as in Accelerate. Only the main process writes.
    """

    name = "mlflow"
    requires_logging_directory = False
    accepts_logging_directory = True

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool | None = False,
        run_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__()
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        raw_tags = os.environ.get("MLFLOW_TAGS", tags)
        parsed_tags: dict[str, Any] | None = (
            json.loads(raw_tags) if isinstance(raw_tags, str) else raw_tags
        )
        raw_nested = os.environ.get("MLFLOW_NESTED_RUN")
        if raw_nested is not None:
            nested_run = _nested_from_env(raw_nested)
        self.experiment_name = experiment_name
        self.logging_dir = None if logging_dir is None else os.fspath(logging_dir)
        self.run_id = run_id
        self.tags = parsed_tags
        self.nested_run = bool(nested_run)
        self.run_name = run_name
        self.description = description
        self.active_run: mlflow.ActiveRun | None = None

    @on_main_process
    def start(self) -> None:
        """Find or create the experiment, then start (or resume) the run."""
        import mlflow

        uri_set: bool = mlflow.is_tracking_uri_set()  # type: ignore[no-untyped-call]
        if self.logging_dir is not None and not uri_set:
            os.makedirs(self.logging_dir, exist_ok=True)
            mlflow.set_tracking_uri(default_tracking_uri(self.logging_dir))
        found = mlflow.search_experiments(filter_string=f"name = '{self.experiment_name}'")
        if found:
            if len(found) > 1:
                logger.warning("Multiple experiments with the same name found. Using first one.")
            experiment_id = found[0].experiment_id
        else:
            experiment_id = mlflow.create_experiment(
                name=str(self.experiment_name),
                artifact_location=self.logging_dir,
                tags=self.tags,
            )
        self.active_run = mlflow.start_run(
            run_id=self.run_id,
            experiment_id=experiment_id,
            run_name=self.run_name,
            nested=self.nested_run,
            tags=self.tags,
            description=self.description,
        )

    @property
    def tracker(self) -> mlflow.ActiveRun | None:
        """The active MLflow run (``None`` before :meth:`start` and on the other processes)."""
        return self.active_run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Log ``values`` as the run's params, in batches of MLflow's limit.

        A value longer than MLflow allows is left out with a warning, as in Accelerate.
        """
        import mlflow
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        kept = []
        for key, value in values.items():
            if len(str(value)) > MAX_PARAM_VAL_LENGTH:
                logger.warning(
                    "MLflowTracker: the value of %r is longer than MLflow's %d characters for "
                    "a param, so it is not logged",
                    key,
                    MAX_PARAM_VAL_LENGTH,
                )
            else:
                kept.append((key, value))
        for i in range(0, len(kept), MAX_PARAMS_TAGS_PER_BATCH):
            mlflow.log_params(dict(kept[i : i + MAX_PARAMS_TAGS_PER_BATCH]))

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log the ``int`` and ``float`` values as metrics at ``step``; others are dropped.

        ``kwargs`` go to ``mlflow.log_metrics``.
        """
        import mlflow

        metrics = {}
        for key, value in values.items():
            if isinstance(value, (int, float)):
                metrics[key] = value
            else:
                logger.warning(
                    "MLflowTracker: %r is a %s, not a number; MLflow's metrics take only int "
                    "and float, so it is not logged",
                    key,
                    type(value).__name__,
                )
        mlflow.log_metrics(metrics, step=step, **kwargs)

    @on_main_process
    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """Log a figure as an artifact of the run (``mlflow.log_figure``)."""
        import mlflow

        mlflow.log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)

    @on_main_process
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        """Log every file of ``local_dir`` as artifacts of the run."""
        import mlflow

        mlflow.log_artifacts(local_dir=local_dir, artifact_path=artifact_path)

    @on_main_process
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Log one file as an artifact of the run."""
        import mlflow

        mlflow.log_artifact(local_path=local_path, artifact_path=artifact_path)

    @on_main_process
    def finish(self) -> None:
        """End the active MLflow run."""
        import mlflow

        mlflow.end_run()
