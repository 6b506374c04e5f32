"""Read a sweep's runs from MLflow (the only source of results); file the report on its parent run.

One row per training run with its variant, family (the `norm_family` tag), learning rate, seed,
outcome and final metrics, following the schema `src.tracking.tracker` writes. Runs without a `norm` tag
(not training jobs) and the report's own summary run are left out; when a variant, learning rate
and seed were run more than once, the latest run counts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from src.report.table import UNKNOWN as UNKNOWN_FAMILY
from src.tracking import store
from src.tracking.store import sqlite_path
from src.tracking.sweep import PARENT_ENV, SUPERSEDED_TAG, SWEEP_TAG, latest_sweep_run

REPORT_RUN_NAME = "report"  # a sweep-type run made for a report when no sweep run exists
OUTCOMES = ("finished", "diverged", "failed", "preempted", "lost", "killed")
# `python -m src.bench variants` logs one run per benchmark into the experiment: per variant the
# step time ratio to INTERLEAVED_REFERENCE (median of interleaved rounds) and its 95% interval.
BENCH_TAG = "normsweep.bench"
BENCH_VARIANTS = "variants"  # the tag's value, and bench-variants the run name
BENCH_RUN_NAME = "bench-variants"
INTERLEAVED_REFERENCE = "torch_layernorm"
RATIO_METRICS = ("ratio", "ratio_low", "ratio_high")  # logged as "<metric>/<variant>"
NORM_COST_METRICS = ("norm_cost_ms", "norm_cost_ms_low", "norm_cost_ms_high", "step_ms")
METRIC_COLUMNS = {  # report column -> MLflow metric
    "train_time_s": "train_time_s",
    "tokens_per_sec": "avg_tokens_per_sec",
    "test_loss": "test_loss",
    "final_train_loss": "final_train_loss",
    "peak_memory_mb": "peak_memory_mb",
    "steps_done": "steps_done",
    "diverged_at_step": "diverged_at_step",
}
CURVE_METRICS = ("train/train_loss", "val/val_loss")
RUN_KEY = ["variant", "lr", "seed"]  # one run counts per key: the latest


class ReportError(Exception):
    """A report that cannot be made (no such experiment, no finished runs); the message says why."""


@dataclass
class Sweep:
    experiment_id: str
    runs: pd.DataFrame  # one row per (variant, seed): see _row
    superseded: int  # older runs of a repeated (variant, seed), left out


def open_client(tracking_uri: str) -> MlflowClient:
    db = sqlite_path(tracking_uri)
    # A client on a missing SQLite file creates an empty store there; say it is missing instead.
    if db is not None and not db.exists():
        raise ReportError(f"no MLflow database at {db} (tracking URI {tracking_uri}); run a sweep first")
    return store.open_client(tracking_uri)


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


def is_training_run(run: Run) -> bool:
    """A job's run that counts: not a sweep's parent run, not replaced by a later run of its config."""
    tags = run.data.tags
    return "norm" in tags and tags.get(SWEEP_TAG) != "true" and SUPERSEDED_TAG not in tags


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
    history = client.get_metric_history(run_id, CURVE_METRICS[0])
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


def load_sweep(experiment: str, tracking_uri: str) -> Sweep:
    """The experiment's training runs, latest per (variant, lr, seed). Raises ReportError if missing."""
    client = open_client(tracking_uri)
    experiment_id = find_experiment(client, tracking_uri, experiment)
    rows = [_row(client, r) for r in _all_runs(client, experiment_id) if is_training_run(r)]
    if not rows:
        return Sweep(experiment_id, pd.DataFrame(columns=["run_id", "variant", "family", "lr", "seed", "outcome"]), 0)
    runs = pd.DataFrame(rows).sort_values("start_time", kind="stable")
    # NaN learning rates (runs without params) must still match each other.
    latest = runs.drop_duplicates(RUN_KEY, keep="last")
    return Sweep(experiment_id, latest.sort_values(RUN_KEY).reset_index(drop=True), len(runs) - len(latest))


def _bench_metrics(tracking_uri: str, experiment_id: str) -> dict[str, float]:
    """The metrics of the experiment's latest finished bench-variants run; empty when it has none."""
    client = MlflowClient(tracking_uri)
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{BENCH_TAG}` = '{BENCH_VARIANTS}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return found[0].data.metrics if found else {}


def _per_variant(metrics: dict[str, float], names: Sequence[str]) -> dict[str, tuple[float, ...]]:
    variants = {key.split("/", 1)[1] for key in metrics if key.startswith(f"{names[0]}/")}
    return {v: tuple(metrics.get(f"{m}/{v}", math.nan) for m in names) for v in variants}


def load_interleaved(tracking_uri: str, experiment_id: str) -> dict[str, tuple[float, float, float]]:
    """Step-time ratio to torch_layernorm (median, low, high) per variant from the latest
    bench-variants run of the experiment; empty when it has none."""
    return _per_variant(_bench_metrics(tracking_uri, experiment_id), RATIO_METRICS)  # type: ignore[return-value]


def load_norm_costs(tracking_uri: str, experiment_id: str) -> dict[str, tuple[float, float, float, float]]:
    """Per variant from the same run, when it timed no_norm too: the norm's own cost in ms (step -
    no_norm's step per round: median, low, high) and the variant's median step in ms."""
    return _per_variant(_bench_metrics(tracking_uri, experiment_id), NORM_COST_METRICS)  # type: ignore[return-value]


def load_curves(tracking_uri: str, runs: pd.DataFrame, keys: Sequence[str] = CURVE_METRICS) -> pd.DataFrame:
    """Step metrics of the given runs, long format: run_id, variant, family, seed, metric, step, value."""
    client = MlflowClient(tracking_uri)
    records = [
        (r.run_id, r.variant, r.family, r.seed, key, m.step, m.value)
        for r in runs.itertuples(index=False)
        for key in keys
        for m in client.get_metric_history(r.run_id, key)
    ]
    return pd.DataFrame(records, columns=["run_id", "variant", "family", "seed", "metric", "step", "value"])


def save_summary_run(
    tracking_uri: str, experiment_id: str, files: Iterable[Path], run_id: str | None = None
) -> str:
    """Log the report's files to the sweep's parent run: the given one, the running sweep's, or the
    experiment's latest; an experiment of single runs gets one `report` run of the same kind."""
    client = MlflowClient(tracking_uri)
    run_id = run_id or os.environ.get(PARENT_ENV)
    if run_id is None:
        latest = latest_sweep_run(client, experiment_id)
        run_id = latest.info.run_id if latest else None
    if run_id is None:
        tags = {SWEEP_TAG: "true", "mlflow.note.content": "The sweep report of this experiment's runs."}
        run_id = client.create_run(experiment_id, run_name=REPORT_RUN_NAME, tags=tags).info.run_id
        client.set_terminated(run_id, "FINISHED")
    for path in files:
        client.log_artifact(run_id, str(path), "report")
    return run_id
