"""MLflow tracking: one experiment per sweep, one run per job, closed exactly once.

Lightning's MLFlowLogger reads MLFLOW_TRACKING_URI when it is imported, and it closes the run at the
end of `fit` (before `test`) and again on errors. The tracker below passes the URI explicitly and
closes the run itself, once, with the real outcome: FINISHED, or FAILED for a crash or a divergence.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from src.paths import PROJECT_ROOT

T = TypeVar("T")

# MLflow's run statuses as Lightning's finalize() names them.
OUTCOME_STATUS = {
    "finished": "success",  # FINISHED
    "diverged": "failed",  # FAILED: a result, but not a trained model
    "failed": "failed",  # FAILED: an exception escaped
    "killed": "KILLED",  # Ctrl+C
    "preempted": "KILLED",  # SIGTERM with a checkpoint to resume from
}


def with_retry(fn: Callable[[], T], attempts: int = 8, delay_s: float = 0.25) -> T:
    """Retry `fn` while SQLite reports a lock or a concurrent schema migration."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:  # sqlalchemy's OperationalError arrives wrapped in MlflowException
            transient = any(s in str(err).lower() for s in ("database is locked", "duplicate column", "already exists"))
            if not transient or attempt == attempts - 1:
                raise
            time.sleep(delay_s * (2**attempt))
    raise AssertionError("unreachable")


def ensure_experiment(tracking_uri: str, name: str, artifact_location: str | None) -> str:
    """Create (or find) the experiment and return its id; creates the SQLite schema on first use."""
    if artifact_location and "://" not in artifact_location:
        Path(artifact_location).mkdir(parents=True, exist_ok=True)
        artifact_location = Path(artifact_location).resolve().as_uri()

    def get_or_create() -> str:
        client = MlflowClient(tracking_uri)
        found = client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise MlflowException(
                    f"MLflow experiment {name!r} is deleted; restore it in the UI or choose another experiment_name"
                )
            return found.experiment_id
        experiment_location = f"{artifact_location}/{name}" if artifact_location else None
        return client.create_experiment(name, artifact_location=experiment_location)

    return with_retry(get_or_create)


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class _ClosedByTracker(MLFlowLogger):
    """An MLFlowLogger that Lightning cannot close: the Tracker closes it once with the outcome."""

    def finalize(self, status: str = "success") -> None:
        pass

    def close(self, status: str) -> None:
        super().finalize(status)


class Tracker:
    """The MLflow run of one training job."""

    def __init__(
        self, cfg: DictConfig, hydra_overrides: list[str], job_num: int | None, resume_run_id: str | None = None
    ) -> None:
        uri = cfg.logger.tracking_uri
        ensure_experiment(uri, cfg.experiment_name, cfg.logger.artifact_location)
        tags = {
            "norm": cfg.norm.norm_type,
            "norm_family": cfg.norm.family,  # from conf/norm/<key>.yaml: the report groups by it
            "model": cfg.model.name,
            "precision": cfg.precision.name,
            "cluster": cfg.cluster.name,
            "seed": str(cfg.seed),
            "git_commit": git_commit(),
            "outcome": "running",
        }
        if job_num is not None:
            tags["hydra_job_num"] = str(job_num)
        self.logger = _ClosedByTracker(
            experiment_name=cfg.experiment_name,
            run_name=cfg.run_name,
            tracking_uri=uri,
            tags=tags,
            run_id=resume_run_id,
        )
        if resume_run_id and rank_zero_only.rank == 0:
            # The run was closed (KILLED) when its last segment stopped; it is live again.
            self.logger.experiment.update_run(resume_run_id, status="RUNNING")
            self.set_tags({"outcome": "running", "resumed": "true"})
        self.cfg = cfg
        self.overrides = hydra_overrides
        self.closed = False

    @property
    def run_id(self) -> str | None:
        return self.logger.run_id

    @rank_zero_only
    def log_inputs(self, extra_params: Mapping[str, Any]) -> None:
        """Params (written once: MLflow params are immutable) and the config artifacts."""
        params = flatten(self.cfg)
        params.update(extra_params)
        with_retry(lambda: self.logger.log_hyperparams(params))
        client, run_id = self.logger.experiment, self.logger.run_id
        client.log_text(run_id, OmegaConf.to_yaml(self.cfg, resolve=True), "config/config.yaml")
        client.log_text(run_id, "\n".join(self.overrides) + "\n", "config/overrides.txt")

    def last_logged_step(self, key: str = "train/loss") -> int:
        """The highest step of `key` already in MLflow (0 if none): a resumed run logs after it."""
        if rank_zero_only.rank != 0:
            return 0
        history = self.logger.experiment.get_metric_history(self.logger.run_id, key)
        return max((m.step for m in history), default=0)

    @rank_zero_only
    def log_final(self, metrics: Mapping[str, float], step: int) -> None:
        self.logger.log_metrics(dict(metrics), step=step)

    @rank_zero_only
    def set_tags(self, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            self.logger.experiment.set_tag(self.logger.run_id, key, value)

    def close(self, outcome: str) -> None:
        """End the run: FINISHED for `finished`, FAILED for `diverged` or `failed`. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.set_tags({"outcome": outcome})
        if rank_zero_only.rank == 0:
            self.logger.close(OUTCOME_STATUS[outcome])


def flatten(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as {"optim.lr": 0.001, ...}: MLflow params are flat key/value pairs."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return out
