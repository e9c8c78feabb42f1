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
        environ = os.environ
        # The MLFLOW_* variables win over the arguments (Accelerate's precedence).
        self.experiment_name = environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.run_id = environ.get("MLFLOW_RUN_ID", run_id)
        given_tags = environ.get("MLFLOW_TAGS", tags)
        self.tags: dict[str, Any] | None = (
            json.loads(given_tags) if isinstance(given_tags, str) else given_tags
        )
        nested_text = environ.get("MLFLOW_NESTED_RUN")
        self.nested_run = bool(nested_run) if nested_text is None else _nested_from_env(nested_text)
        self.logging_dir = None if logging_dir is None else os.fspath(logging_dir)
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
        self.active_run = mlflow.start_run(
            experiment_id=self._experiment_id(),
            run_id=self.run_id,
            run_name=self.run_name,
            description=self.description,
            tags=self.tags,
            nested=self.nested_run,
        )

    def _experiment_id(self) -> str:
        """The id of the active experiment named ``experiment_name``, created if there is none."""
        import mlflow

        wanted = f"name = '{self.experiment_name}'"
        matches = mlflow.search_experiments(filter_string=wanted)
        if not matches:
            name, where = str(self.experiment_name), self.logging_dir
            created: str = mlflow.create_experiment(name, artifact_location=where, tags=self.tags)
            return created
        if len(matches) > 1:
            logger.warning(
                "MLflowTracker: %d experiments match %s; the run goes to the first, id %s",
                len(matches),
                wanted,
                matches[0].experiment_id,
            )
        first: str = matches[0].experiment_id
        return first

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

        numbers = {k: v for k, v in values.items() if isinstance(v, int | float)}
        for key in (k for k in values if k not in numbers):
            logger.warning(
                "MLflowTracker: %r is a %s, not a number; MLflow's metrics take only int "
                "and float, so it is not logged",
                key,
                type(values[key]).__name__,
            )
        mlflow.log_metrics(numbers, step=step, **kwargs)

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
