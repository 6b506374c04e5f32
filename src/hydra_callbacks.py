"""Hydra callbacks that bracket a multirun."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from src.paths import register_resolvers


class MlflowSetup(Callback):
    """Create the MLflow database and the sweep's experiment before any job starts.

    Each job opens the store again under its lock (src/store.py), which also protects processes
    this callback never sees (a second terminal, torchrun ranks, SLURM tasks).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        register_resolvers()
        if not config.logger.enabled:
            return
        from src.store import ensure_experiment  # torch-free; MLflow itself is imported late

        ensure_experiment(config.logger.tracking_uri, config.experiment_name, config.logger.artifact_location)
