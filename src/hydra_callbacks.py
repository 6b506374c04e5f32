"""Hydra callbacks that bracket a multirun."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from src.paths import register_resolvers


class MlflowSetup(Callback):
    """Create the MLflow database and the sweep's experiment before any job starts.

    Parallel jobs that each open a fresh SQLite store race on schema creation ("duplicate column
    name") and on experiment creation; doing it once here leaves the jobs only plain writes.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        register_resolvers()
        if not config.logger.enabled:
            return
        from src.tracking import ensure_experiment  # imported late: MLflow is slow to import

        ensure_experiment(config.logger.tracking_uri, config.experiment_name, config.logger.artifact_location)
