"""Read a sweep's runs from MLflow (the only source of results) and keep its summary run.

One row per training run with its variant, family (the `norm_family` tag), learning rate, seed,
outcome and final metrics, following the schema `src.tracking` writes. Runs without a `norm` tag
(not training jobs) and the report's own summary run are left out; when a variant, learning rate
and seed were run more than once, the latest run counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from src import paths
from src.report.table import UNKNOWN as UNKNOWN_FAMILY

SUMMARY_TAG = "normsweep.summary"
SUMMARY_RUN_NAME = "summary"
OUTCOMES = ("finished", "diverged", "failed")
METRIC_COLUMNS = {  # report column -> MLflow metric
    "train_time_s": "train_time_s",
    "tokens_per_sec": "tokens_per_sec",
    "test_loss": "test/loss",
    "final_train_loss": "final_train_loss",
    "peak_memory_mb": "peak_memory_mb",
    "steps_done": "steps_done",
    "diverged_at_step": "diverged_at_step",
}
CURVE_METRICS = ("train/loss", "val/loss")
RUN_KEY = ["variant", "lr", "seed"]  # one run counts per key: the latest


class ReportError(Exception):
    """A report that cannot be made (no such experiment, no finished runs); the message says why."""


def _sqlite_path(tracking_uri: str) -> Path | None:
    if not tracking_uri.startswith("sqlite:"):
        return None
    path = urlparse(tracking_uri).path
    # sqlite:////abs/path parses to '//abs/path'; sqlite:///rel/path to '/rel/path'.
    return Path(path[1:]) if path.startswith("//") else Path(path.lstrip("/"))


@dataclass
class Sweep:
    experiment_id: str
    runs: pd.DataFrame  # one row per (variant, seed): see _row
    superseded: int  # older runs of a repeated (variant, seed), left out


def open_client(tracking_uri: str) -> MlflowClient:
    db = _sqlite_path(tracking_uri)
    # A client on a missing SQLite file creates an empty store there; say it is missing instead.
    if db is not None and not db.exists():
        raise ReportError(f"no MLflow database at {db} (tracking URI {tracking_uri}); run a sweep first")
    return MlflowClient(tracking_uri)


def find_experiment(client: MlflowClient, tracking_uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None or experiment.lifecycle_stage == "deleted":
        names = sorted(e.name for e in client.search_experiments())
        listed = ", ".join(names) if names else "none"
        raise ReportError(f"MLflow experiment {name!r} not found at {tracking_uri} (experiments there: {listed})")
    return experiment.experiment_id


def _all_runs(client: MlflowClient, experiment_id: str) -> list[Run]:
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def is_summary(run: Run) -> bool:
    return run.data.tags.get(SUMMARY_TAG) == "true"


def outcome_of(run: Run) -> str:
    """The `outcome` tag, or the run status when the job died before it could set one."""
    tag = run.data.tags.get("outcome")
    if tag in OUTCOMES:
        return tag
    status = run.info.status
    if status in ("RUNNING", "SCHEDULED"):
        return "running"
    return "finished" if status == "FINISHED" else "failed"


def _last_step(client: MlflowClient, run_id: str) -> float:
    history = client.get_metric_history(run_id, "train/loss")
    return float(max(m.step for m in history)) if history else math.nan


def _row(client: MlflowClient, run: Run) -> dict[str, object]:
    metrics, tags = run.data.metrics, run.data.tags
    outcome = outcome_of(run)
    row: dict[str, object] = {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "variant": tags["norm"],
        "family": tags.get("norm_family", UNKNOWN_FAMILY),  # older runs have no such tag
        "lr": float(run.data.params.get("optim.lr", math.nan)),
        "seed": int(tags.get("seed", run.data.params.get("seed", -1))),
        "outcome": outcome,
        "status": run.info.status,
        "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
    }
    for column, key in METRIC_COLUMNS.items():
        row[column] = metrics.get(key, math.nan)
    # Where an unfinished run stopped: the divergence step, else the steps it completed.
    stopped = row["diverged_at_step"] if outcome == "diverged" else row["steps_done"]
    if outcome != "finished" and math.isnan(stopped):
        stopped = _last_step(client, run.info.run_id)
    row["stopped_at_step"] = stopped if outcome != "finished" else math.nan
    return row


def load_sweep(experiment: str, tracking_uri: str | None = None) -> Sweep:
    """The experiment's training runs, latest per (variant, lr, seed). Raises ReportError if missing."""
    uri = tracking_uri or paths.tracking_uri()
    client = open_client(uri)
    experiment_id = find_experiment(client, uri, experiment)
    rows = [_row(client, r) for r in _all_runs(client, experiment_id) if "norm" in r.data.tags and not is_summary(r)]
    if not rows:
        return Sweep(experiment_id, pd.DataFrame(columns=["run_id", "variant", "family", "lr", "seed", "outcome"]), 0)
    runs = pd.DataFrame(rows).sort_values("start_time", kind="stable")
    # NaN learning rates (runs without params) must still match each other.
    latest = runs.drop_duplicates(RUN_KEY, keep="last")
    return Sweep(experiment_id, latest.sort_values(RUN_KEY).reset_index(drop=True), len(runs) - len(latest))


def load_curves(tracking_uri: str | None, runs: pd.DataFrame, keys: Sequence[str] = CURVE_METRICS) -> pd.DataFrame:
    """Step metrics of the given runs, long format: run_id, variant, family, seed, metric, step, value."""
    client = MlflowClient(tracking_uri or paths.tracking_uri())
    records = [
        (r.run_id, r.variant, r.family, r.seed, key, m.step, m.value)
        for r in runs.itertuples(index=False)
        for key in keys
        for m in client.get_metric_history(r.run_id, key)
    ]
    return pd.DataFrame(records, columns=["run_id", "variant", "family", "seed", "metric", "step", "value"])


def save_summary_run(tracking_uri: str | None, experiment_id: str, files: Iterable[Path]) -> str:
    """Log the report's files as artifacts of the experiment's one summary run (reused, not piled up)."""
    client = MlflowClient(tracking_uri or paths.tracking_uri())
    found = sorted(
        (r for r in _all_runs(client, experiment_id) if is_summary(r)), key=lambda r: r.info.start_time, reverse=True
    )
    if found:
        run_id = found[0].info.run_id
        for extra in found[1:]:  # left by concurrent reports; one is enough
            client.delete_run(extra.info.run_id)
    else:
        run_id = client.create_run(experiment_id, run_name=SUMMARY_RUN_NAME, tags={SUMMARY_TAG: "true"}).info.run_id
    for path in files:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, "FINISHED")
    return run_id
