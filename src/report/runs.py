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
from typing import TYPE_CHECKING

import pandas as pd

from src.report.table import LOSS_REFERENCE
from src.report.table import UNKNOWN as UNKNOWN_FAMILY
from src.tracking.store import Store, redact_uri, sqlite_path
from src.tracking.sweep import PARENT_ENV, latest_sweep_run
from src.tracking.tags import (
    BENCH_TAG,
    DIVERGED,
    FAILED,
    FINGERPRINT_TAG,
    FINISHED,
    NORM_FAMILY_TAG,
    NORM_TAG,
    NOTE_TAG,
    OUTCOME_TAG,
    RUN_OUTCOMES,
    RUNNING,
    SEED_TAG,
    SUPERSEDED_TAG,
    SWEEP_TAG,
)

if TYPE_CHECKING:
    from src.tracking.store import Run

REPORT_RUN_NAME = "report"  # a sweep-type run made for a report when no sweep run exists
REPORT_ARTIFACT_DIR = "report"  # the report's files on the sweep's run
# `python -m src.bench variants` logs one run per benchmark into the experiment (tagged BENCH_TAG): per
# variant the step time ratio to INTERLEAVED_REFERENCE (median of interleaved rounds) and its 95% interval.
BENCH_VARIANTS = "variants"  # the tag's value, and bench-variants the run name
BENCH_RUN_NAME = "bench-variants"
INTERLEAVED_REFERENCE = LOSS_REFERENCE  # one reference: the table's speed column is headed "vs" it too
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


def open_store(tracking_uri: str) -> Store:
    """The store to read; a missing SQLite file is reported as missing (opening it would create it)."""
    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():
        raise ReportError(f"no MLflow database at {db} (tracking URI {redact_uri(tracking_uri)}); run a sweep first")
    return Store.connect(tracking_uri)


def find_experiment(store: Store, name: str) -> str:
    experiment = store.find_experiment(name)
    if experiment is None:
        listed = ", ".join(store.experiment_names()) or "none"
        raise ReportError(
            f"MLflow experiment {name!r} not found at {redact_uri(store.uri)} (experiments there: {listed})"
        )
    return experiment.experiment_id


def is_training_run(run: Run) -> bool:
    """A job's run that counts: not a sweep's parent run, not replaced by a later run of its config."""
    tags = run.data.tags
    return NORM_TAG in tags and tags.get(SWEEP_TAG) != "true" and SUPERSEDED_TAG not in tags


def outcome_of(run: Run) -> str:
    """The `outcome` tag, or the run status when the job died before it could set one."""
    tag = run.data.tags.get(OUTCOME_TAG)
    if tag in RUN_OUTCOMES:
        return tag
    status = run.info.status
    if status in ("RUNNING", "SCHEDULED"):
        return RUNNING
    return FINISHED if status == "FINISHED" else FAILED


def _last_step(store: Store, run_id: str) -> float:
    history = store.metric_history(run_id, CURVE_METRICS[0])
    return float(max(m.step for m in history)) if history else math.nan


def _devices(params: dict[str, str]) -> float:
    """Devices one run trained on (devices per node x nodes); NaN when not a count (e.g. "auto")."""
    per_node, nodes = params.get("cluster.devices", ""), params.get("cluster.num_nodes", "1")
    return float(int(per_node) * int(nodes)) if per_node.isdigit() and nodes.isdigit() else math.nan


def _row(store: Store, run: Run) -> dict[str, object]:
    metrics, tags = run.data.metrics, run.data.tags
    outcome = outcome_of(run)
    row: dict[str, object] = {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "variant": tags[NORM_TAG],
        "family": tags.get(NORM_FAMILY_TAG, UNKNOWN_FAMILY),  # older runs have no such tag
        "lr": float(run.data.params.get("optim.lr", math.nan)),
        "seed": int(tags.get(SEED_TAG, run.data.params.get("seed", -1))),
        "outcome": outcome,
        "status": run.info.status,
        "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
        "devices": _devices(run.data.params),
        "fingerprint": tags.get(FINGERPRINT_TAG, ""),  # the config's identity (src.tracking.identity)
    }
    for column, key in METRIC_COLUMNS.items():
        row[column] = metrics.get(key, math.nan)
    # Where an unfinished run stopped: the divergence step, else the steps it completed.
    stopped = row["diverged_at_step"] if outcome == DIVERGED else row["steps_done"]
    if outcome != FINISHED and math.isnan(stopped):
        stopped = _last_step(store, run.info.run_id)
    row["stopped_at_step"] = stopped if outcome != FINISHED else math.nan
    return row


def load_sweep(experiment: str, store: Store) -> Sweep:
    """The experiment's training runs, latest per (variant, lr, seed). Raises ReportError if missing."""
    experiment_id = find_experiment(store, experiment)
    rows = [_row(store, r) for r in store.runs(experiment_id) if is_training_run(r)]
    if not rows:
        return Sweep(experiment_id, pd.DataFrame(columns=["run_id", "variant", "family", "lr", "seed", "outcome"]), 0)
    runs = pd.DataFrame(rows).sort_values("start_time", kind="stable")
    # NaN learning rates (runs without params) must still match each other.
    latest = runs.drop_duplicates(RUN_KEY, keep="last")
    return Sweep(experiment_id, latest.sort_values(RUN_KEY).reset_index(drop=True), len(runs) - len(latest))


def _bench_metrics(store: Store, experiment_id: str) -> dict[str, float]:
    """The metrics of the experiment's latest finished bench-variants run; empty when it has none."""
    found = store.runs(
        experiment_id,
        f"tags.`{BENCH_TAG}` = '{BENCH_VARIANTS}' and attributes.status = 'FINISHED'",
        ["attributes.start_time DESC"],
        most=1,
    )
    return found[0].data.metrics if found else {}


def _per_variant(metrics: dict[str, float], names: Sequence[str]) -> dict[str, tuple[float, ...]]:
    variants = {key.split("/", 1)[1] for key in metrics if key.startswith(f"{names[0]}/")}
    return {v: tuple(metrics.get(f"{m}/{v}", math.nan) for m in names) for v in variants}


def load_interleaved(store: Store, experiment_id: str) -> dict[str, tuple[float, float, float]]:
    """Step-time ratio to torch_layernorm (median, low, high) per variant from the latest
    bench-variants run of the experiment; empty when it has none."""
    return _per_variant(_bench_metrics(store, experiment_id), RATIO_METRICS)  # type: ignore[return-value]


def load_norm_costs(store: Store, experiment_id: str) -> dict[str, tuple[float, float, float, float]]:
    """Per variant from the same run, when it timed no_norm too: the norm's own cost in ms (step -
    no_norm's step per round: median, low, high) and the variant's median step in ms."""
    return _per_variant(_bench_metrics(store, experiment_id), NORM_COST_METRICS)  # type: ignore[return-value]


def load_curves(store: Store, runs: pd.DataFrame, keys: Sequence[str] = CURVE_METRICS) -> pd.DataFrame:
    """Step metrics of the given runs, long format: run_id, variant, family, seed, metric, step, value."""
    records = [
        (r.run_id, r.variant, r.family, r.seed, key, m.step, m.value)
        for r in runs.itertuples(index=False)
        for key in keys
        for m in store.metric_history(r.run_id, key)
    ]
    return pd.DataFrame(records, columns=["run_id", "variant", "family", "seed", "metric", "step", "value"])


def save_summary_run(store: Store, experiment_id: str, files: Iterable[Path], run_id: str | None = None) -> str:
    """Log the report's files to the sweep's parent run: the given one, the running sweep's, or the
    experiment's latest; an experiment of single runs gets one `report` run of the same kind."""
    run_id = run_id or os.environ.get(PARENT_ENV)
    if run_id is None:
        latest = latest_sweep_run(store, experiment_id)
        run_id = latest.info.run_id if latest else None
    if run_id is None:
        tags = {SWEEP_TAG: "true", NOTE_TAG: "The sweep report of this experiment's runs."}
        run_id = store.create_run(experiment_id, REPORT_RUN_NAME, tags)
        store.terminate(run_id, "FINISHED")
    store.log_files(run_id, files, REPORT_ARTIFACT_DIR)
    return run_id
