"""accelkw-mlflow: ``MLflowTracker``, a run's params and metrics through MLflow's tracking API."""

from accelkw_mlflow.tracker import MLflowTracker, default_tracking_uri

__all__ = ["MLflowTracker", "default_tracking_uri"]
