"""MLflow tracking: one experiment per sweep, one run per job, closed exactly once.

Lightning's MLFlowLogger reads MLFLOW_TRACKING_URI when it is imported, and it closes the run at the
end of `fit` (before `test`) and again on errors. The tracker below passes the URI explicitly and
closes the run itself, once, with the real outcome: FINISHED, or FAILED for a crash or a divergence.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from src.data.cache import read_meta
from src.paths import PROJECT_ROOT
from src.tracking import store
from src.tracking.datasets import log_datasets
from src.tracking.environment import git_state, run_tags
from src.tracking.identity import identity_config
from src.tracking.store import redact_text, redact_uri, with_retry
from src.tracking.summary import NOTE_TAG, SUMMARY_STEP
from src.tracking.sweep import FINGERPRINT_TAG, HEARTBEAT_TAG, PARENT_TAG, liveness_tags

CONFIG_ARTIFACT = "config/config.yaml"  # the resolved config, without this machine's paths
MACHINE_PATHS_ARTIFACT = "config/machine_paths.yaml"  # where this run read and wrote, on its machine
# Keys whose values are places on the machine that ran the job (identity.py leaves them out too).
MACHINE_PATH_KEYS = ("paths", "logger.tracking_uri", "logger.artifact_location", "data.cache_dir", "checkpoint.dir", "ckpt_path")
# MLflow's run statuses as Lightning's finalize() names them.
OUTCOME_STATUS = {
    "finished": "success",  # FINISHED
    "diverged": "failed",  # FAILED: a result, but not a trained model
    "failed": "failed",  # FAILED: an exception escaped
    "killed": "KILLED",  # Ctrl+C
    "preempted": "KILLED",  # SIGTERM with a checkpoint to resume from
}


def ensure_experiment(tracking_uri: str, name: str, artifact_location: str | None) -> str:
    """Create (or find) the experiment and return its id; src/store.py opens the store safely."""
    return store.ensure_experiment(tracking_uri, name, artifact_location)


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


@dataclass(frozen=True)
class TokenCacheRef:
    """The token cache a run reads: its key (corpus, split, tokenizer), folder and the splits used."""

    cache_key: str
    folder: Path
    splits: tuple[str, ...]


class _ClosedByTracker(MLFlowLogger):
    """An MLFlowLogger that Lightning cannot close (the Tracker closes it once with the outcome),
    and that never logs a step twice: a resumed run skips the steps already in MLflow."""

    log_after_step = 0

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is not None and step <= self.log_after_step:
            return
        super().log_metrics(dict(metrics), step)

    def finalize(self, status: str = "success") -> None:
        pass

    def close(self, status: str) -> None:
        super().finalize(status)


class Tracker:
    """The MLflow run of one training job: a new run, or an existing one continued (`run_id`)."""

    def __init__(
        self,
        cfg: DictConfig,
        hydra_overrides: list[str],
        job_num: int | None,
        fingerprint: str,
        run_id: str | None = None,
        parent_run_id: str | None = None,
    ) -> None:
        uri = cfg.logger.tracking_uri
        ensure_experiment(uri, cfg.experiment_name, cfg.logger.artifact_location)
        self.git = git_state()
        tags = {
            "norm": cfg.norm.norm_type,
            "norm_family": cfg.norm.family,  # from conf/norm/<key>.yaml: the report groups by it
            "model": cfg.model.name,
            "precision": cfg.precision.name,
            "cluster": cfg.cluster.name,
            "seed": str(cfg.seed),
            "git_commit": git_commit(),
            "outcome": "running",
            FINGERPRINT_TAG: fingerprint,
            **liveness_tags(),
            **run_tags(cfg, self.git),  # versions, device, host, world size, git_dirty, deterministic
        }
        if job_num is not None:
            tags["hydra_job_num"] = str(job_num)
        if parent_run_id and not run_id:
            tags[PARENT_TAG] = parent_run_id
        self.logger = _ClosedByTracker(
            experiment_name=cfg.experiment_name,
            run_name=cfg.run_name,
            tracking_uri=uri,
            tags=tags,
            run_id=run_id,
        )
        self.resumed = run_id is not None
        if self.resumed and rank_zero_only.rank == 0:
            # The run was closed (KILLED) when its last segment stopped; it is live again.
            self.logger.experiment.update_run(run_id, status="RUNNING")
            self.set_tags({"outcome": "running", "resumed": "true", **liveness_tags()})
            self.logger.log_after_step = self.last_logged_step()
        self.cfg = cfg
        self.overrides = hydra_overrides
        self.closed = False
        self.system_metrics = self._start_system_metrics(float(cfg.logger.get("system_metrics_s") or 0))
        self._last_beat = time.monotonic()

    def _start_system_metrics(self, every_s: float) -> Any:
        """MLflow's own sampler of CPU, memory (and GPU) utilisation, on a thread of rank 0.
        Measured at 0.12-0.15% of one core at one sample per 10 s (docs/mlflow-ui.md)."""
        if every_s <= 0 or rank_zero_only.rank != 0:
            return None
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # Three INFO lines per run (started, stopping, terminated) would bury the run's own summary.
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)

        monitor = SystemMetricsMonitor(
            self.logger.run_id, sampling_interval=every_s, resume_logging=self.resumed,
            tracking_uri=self.cfg.logger.tracking_uri,
        )  # fmt: skip
        monitor.start()
        return monitor

    @property
    def run_id(self) -> str | None:
        return self.logger.run_id

    @rank_zero_only
    def log_inputs(self, extra_params: Mapping[str, Any], data: TokenCacheRef | None = None) -> None:
        """Params (once: MLflow params are immutable), the config artifacts and the dataset inputs
        (`data`: the token cache the run reads). A resumed run has them."""
        if self.resumed:
            return
        # The experiment's variables only: machine-local paths and the tracking location are not params.
        params = flatten(identity_config(self.cfg))
        params.update(extra_params)
        with_retry(lambda: self.logger.log_hyperparams(params))
        client, run_id = self.logger.experiment, self.logger.run_id
        portable, machine = split_machine_paths(redacted_config(self.cfg))
        client.log_text(run_id, OmegaConf.to_yaml(portable), CONFIG_ARTIFACT)
        client.log_text(run_id, OmegaConf.to_yaml(machine), MACHINE_PATHS_ARTIFACT)
        if data is not None:
            splits = read_meta(data.folder)["splits"]
            log_datasets(client, run_id, data.cache_key, splits, data.splits)
        client.log_text(run_id, redact_text("\n".join(self.overrides)) + "\n", "config/overrides.txt")
        if self.git.dirty:  # the commit alone does not say what ran
            client.log_text(run_id, self.git.diff, "git/diff.patch")

    def last_logged_step(self, key: str = "train/train_loss") -> int:
        """The highest step of `key` already in MLflow (0 if none): a resumed run logs after it."""
        if rank_zero_only.rank != 0:
            return 0
        history = self.logger.experiment.get_metric_history(self.logger.run_id, key)
        return max((m.step for m in history), default=0)

    @rank_zero_only
    def heartbeat(self, every_s: float) -> None:
        """Refresh the heartbeat tag, at most every `every_s` seconds (a re-run tells live from lost)."""
        if time.monotonic() - self._last_beat >= every_s:
            self._last_beat = time.monotonic()
            self.set_tags({HEARTBEAT_TAG: f"{time.time():.0f}"})

    @rank_zero_only
    def log_final(self, metrics: Mapping[str, float]) -> None:
        """The run's headline numbers, once, at SUMMARY_STEP (past the resume filter, which would
        drop step 0 on a resumed run and leave it FINISHED without results)."""
        MLFlowLogger.log_metrics(self.logger, dict(metrics), step=SUMMARY_STEP)

    @rank_zero_only
    def set_tags(self, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            self.logger.experiment.set_tag(self.logger.run_id, key, value)

    def close(self, outcome: str, note: str | None = None) -> None:
        """End the run: FINISHED for `finished`, FAILED for `diverged` or `failed`. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.system_metrics is not None:
            self.system_metrics.finish()
        self.set_tags({"outcome": outcome, **({NOTE_TAG: note} if note else {})})
        if rank_zero_only.rank == 0:
            self.logger.close(OUTCOME_STATUS[outcome])


def split_machine_paths(cfg: DictConfig) -> tuple[DictConfig, DictConfig]:
    """(the config without this machine's paths, those paths): the first is what another machine can
    reuse and compare; the second says where this run read and wrote."""
    portable = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    machine = OmegaConf.create()
    for key in MACHINE_PATH_KEYS:
        value = OmegaConf.select(portable, key, default=None)
        if value is None:
            continue
        OmegaConf.update(machine, key, value)
        *parents, leaf = key.split(".")
        node = OmegaConf.select(portable, ".".join(parents)) if parents else portable
        node.pop(leaf)
    return portable, machine


def redacted_config(cfg: DictConfig) -> DictConfig:
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    if OmegaConf.select(out, "logger.tracking_uri"):
        out.logger.tracking_uri = redact_uri(out.logger.tracking_uri)
    return out


def flatten(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as {"optim.lr": 0.001, ...}: MLflow params are flat key/value pairs."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg, "")
    return out
