"""Read a sweep's runs from MLflow (the only source of results); file the report on its parent run.

One row per training run with its variant (what the experiment's runs differ in, seed aside:
src.tracking.variants), family (the `norm_family` tag), learning rate, seed, outcome and final
metrics, following the schema `src.tracking.tracker` writes. Runs without a `norm` tag (not training
jobs) and the report's own summary run are left out; when a config (fingerprint) was run more than
once, its latest run with a result counts (else its latest run).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd

from src.report.read.published import MODEL_AXES, STUDY_CODE
from src.report.read.table import AXIS_PREFIX, order_of
from src.report.read.table import UNKNOWN as UNKNOWN_FAMILY
from src.tracking.identity import ADDED_LATER, INIT_KEY, INIT_RECORDED_BEFORE
from src.tracking.store import Store
from src.tracking.store_uri import redact_uri, sqlite_path
from src.tracking.sweep import PARENT_ENV, STALE_AFTER_S, latest_sweep_run, predates_init, run_state
from src.tracking.tags import (
    BENCH_TAG,
    BENCH_VARIANTS,
    CODE_FINGERPRINT_TAG,
    DEVICE_TAG,
    DIVERGED,
    EVAL_NOT_FINITE,
    FINGERPRINT_TAG,
    FINISHED,
    GIT_COMMIT_TAG,
    GIT_DIRTY_TAG,
    GPU_COUNT_TAG,
    NORM_DISPATCH_TAG,
    NORM_EPS_TAG,
    NORM_FAMILY_TAG,
    NORM_FILE_HASH_TAG,
    NORM_PACKAGE_TAG,
    NORM_PARAMS_TAG,
    NORM_PROJECT_CODE_TAG,
    NORM_REFERENCE_TAG,
    NORM_TAG,
    NORM_TARGET_TAG,
    NOTE_TAG,
    RESULT_OUTCOMES,
    SEED_TAG,
    SUPERSEDED_TAG,
    SWEEP_TAG,
    VARIANT_AXES_TAG,
    VARIANT_TAG,
)
from src.tracking.variants import (
    LR_KEY,
    NORM_AXIS,
    NORM_KEY,
    SEED_KEY,
    Axis,
    Variants,
    find_variants,
    label_without,
    naming_keys,
    variant_tags,
)

if TYPE_CHECKING:
    from src.tracking.store import Run

REPORT_RUN_NAME = "report"  # a sweep-type run made for a report when no sweep run exists
REPORT_ARTIFACT_DIR = "report"  # the report's files on the sweep's run
# `python -m src.bench variants` logs one run per benchmark into the experiment (BENCH_TAG = BENCH_VARIANTS):
# per variant the step time ratio to REFERENCE_VARIANT (median of interleaved rounds) and its 95% interval.
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
RUN_KEY = ["variant", "lr", "seed"]  # one run counts per key, the latest, for records without a fingerprint


class ReportError(Exception):
    """A report that cannot be made (no such experiment, no run with a result); the message says why."""


@dataclass
class Sweep:
    experiment_id: str
    runs: pd.DataFrame  # one row per config (variant, seed): see _row
    superseded: int  # the other runs of a config run more than once, left out
    axes: tuple[Axis, ...] = ()  # what the runs vary, seed aside (none: the norm alone, one variant per norm)


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


def _devices(params: dict[str, str]) -> float:
    """Devices one run trained on (devices per node x nodes); NaN when not a count (e.g. "auto")."""
    per_node, nodes = params.get("cluster.devices", ""), params.get("cluster.num_nodes", "1")
    return float(int(per_node) * int(nodes)) if per_node.isdigit() and nodes.isdigit() else math.nan


def _number(params: dict[str, str], key: str) -> float:
    try:
        return float(params[key])
    except (KeyError, ValueError):
        return math.nan


def device_type(params: dict[str, str], tags: dict[str, str]) -> str:
    """"cuda" where the run's tensors lived on a CUDA device, else its accelerator ("cpu", "mps", ...):
    `auto` counts as CUDA where the run found a GPU (it recorded their count)."""
    accelerator = params.get("cluster.accelerator", "")
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and GPU_COUNT_TAG in tags):
        return "cuda"
    return accelerator or "unknown"


def setting_of(params: dict[str, str], tags: dict[str, str]) -> dict[str, object]:
    """Where a run was made, for setting a sweep beside the published study (src.report.words.study_setting)."""
    shape = (params.get(f"model.{k}", "?") for k in ("n_layers", "emb_dim", "context_length"))
    return {
        "device_type": device_type(params, tags),
        "device_name": tags.get(DEVICE_TAG, ""),
        "model": "{}: {} layers × {}, context {}".format(params.get("model.name", "?"), *shape),
        "n_params": _number(params, "n_params"),
        "tokens": _number(params, "budget.total_tokens"),
        "precision": f"{params.get('precision.name', '?')} (matmul precision {params.get('precision.matmul_precision', '?')})",
        "dispatch": tags.get(NORM_DISPATCH_TAG, ""),  # the kernels its norm ran (src.training.norm_dispatch)
        **{key: params.get(key, "") for key in (*MODEL_AXES, *STUDY_CODE)},  # swept or not: is it the study's model and code?
    }


def _row(store: Store, run: Run, variants: Variants, stale_after_s: float) -> dict[str, object]:
    metrics, tags = run.data.metrics, run.data.tags
    outcome = run_state(run, stale_after_s)  # as `--status` judges it: a dead RUNNING run is lost
    run_id = run.info.run_id
    row: dict[str, object] = {
        "run_id": run_id,
        "run_name": run.info.run_name,
        "variant": variants.labels[run_id],
        "norm": tags[NORM_TAG],
        "variant_tag": tags.get(VARIANT_TAG, ""),  # as recorded at sweep time (none on older runs)
        "family": tags.get(NORM_FAMILY_TAG, UNKNOWN_FAMILY),  # older runs have no such tag
        "lr": float(run.data.params.get("optim.lr", math.nan)),
        "seed": int(tags.get(SEED_TAG, run.data.params.get("seed", -1))),
        "outcome": outcome,
        "status": run.info.status,
        "start_time": pd.to_datetime(run.info.start_time, unit="ms"),
        # Its end (NaT while running): with the starts, whether jobs ran one after another or at once
        # (src.report.words.jobs), which the jobs' own times are read with.
        "end_time": pd.to_datetime(run.info.end_time, unit="ms") if run.info.end_time else pd.NaT,
        "devices": _devices(run.data.params),
        "fingerprint": tags.get(FINGERPRINT_TAG, ""),  # the config's identity (src.tracking.identity)
        # the code that made it (src.tracking.code; "" before them): of a norm of the user's, the project's
        # part, as the sweep records it; its own file is its hash, in the table, and stops a re-run when edited
        "code": tags.get(NORM_PROJECT_CODE_TAG) or tags.get(CODE_FINGERPRINT_TAG, ""),
        "norm_reference": tags.get(NORM_REFERENCE_TAG, ""),  # a norm of the user's: the built-in it is compared with
        "norm_code": user_norm_code(tags),
        "norm_target": tags.get(NORM_TARGET_TAG, ""),  # its class or factory, as data (the study section names it)
        "commit": tags.get(GIT_COMMIT_TAG, "")[:7] + ("-dirty" if tags.get(GIT_DIRTY_TAG) == "true" else ""),
    }
    row.update(setting_of(with_added_later(run.data.params), tags))  # "" where unrecorded: no difference from the study
    row.update({f"{AXIS_PREFIX}{name}": value for name, value in variants.parts[run_id].items()})
    row.update({column: metrics.get(key, math.nan) for column, key in METRIC_COLUMNS.items()})
    # Where an unfinished run stopped: the divergence step, else the steps it completed.
    stopped = row["diverged_at_step"] if outcome == DIVERGED else row["steps_done"]
    trained_through = outcome in (FINISHED, EVAL_NOT_FINITE)  # it did not stop: its evaluation broke
    if not trained_through and math.isnan(stopped):  # its last step logged
        history = store.metric_history(run_id, CURVE_METRICS[0])
        stopped = float(max(m.step for m in history)) if history else math.nan
    row["stopped_at_step"] = math.nan if trained_through else stopped
    return row


def user_norm_code(tags: Mapping[str, str]) -> str:
    """A norm of the user's as the table shows it: `my_norms.MyNorm (sha256 1a2b3c4d, 64 params)`; "" for a built-in."""
    target = tags.get(NORM_TARGET_TAG)
    if not target:
        return ""
    made = tags.get(NORM_PACKAGE_TAG) or f"sha256 {tags.get(NORM_FILE_HASH_TAG, '?')[:8]}"
    eps = "" if tags.get(NORM_EPS_TAG) != "not taken" else ", no eps"
    return f"{target} ({made}, {tags.get(NORM_PARAMS_TAG, '?')} params{eps})"


def recorded_params(run: Run) -> dict[str, str]:
    """The run's params, with the norm and seed its tags name (records that logged no such param), and
    each key added later at the value the run trained with (ADDED_LATER)."""
    tags = run.data.tags
    seed = tags.get(SEED_TAG)
    params = {NORM_KEY: tags[NORM_TAG], **({SEED_KEY: seed} if seed is not None else {}), **run.data.params}
    if predates_init(run):  # its init by its one label, not a missing value (`init=none`, `None`)
        params[INIT_KEY] = INIT_RECORDED_BEFORE
    return with_added_later(params) if run.data.params else params


def with_added_later(params: dict[str, str]) -> dict[str, str]:
    """A run's params with each key added after `model.init` at the value the run trained with: those
    kept it as their default, so a run that names it is the same variant. (`model.init` changed its
    default: a run without it is labelled, not filled; an empty record says nothing.)"""
    if not params:
        return params
    return {**{k: v for k, v in ADDED_LATER.items() if k != INIT_KEY}, **params}


def variant_ranks(runs: pd.DataFrame, variants: Variants) -> list[int]:
    """Each run's variant's place in the table: by norm as the study orders them (family, written-out
    first), then by each other axis's values in the order the sweep ran them."""
    norms = order_of(dict(zip(runs.norm, runs.family, strict=True)))
    others = [a.name for a in variants.axes if a.name != NORM_AXIS]
    seen = {name: variants.values(name) for name in others}
    keys = [
        (norms.index(r.norm), *(seen[n].index(variants.parts[r.run_id][n]) for n in others), r.variant)
        for r in runs.itertuples(index=False)
    ]
    order = {k: i for i, k in enumerate(sorted(set(keys)))}
    return [order[k] for k in keys]


def load_sweep(experiment: str, store: Store, stale_after_s: float = STALE_AFTER_S) -> Sweep:
    """The experiment's training runs, latest per config (fingerprint), each with its variant: what
    the runs' recorded params differ in, seed aside (src.tracking.variants), and its state
    (`run_state`: a RUNNING run silent for `stale_after_s`, `sweep.stale_after_s`, is lost). Raises
    ReportError if missing."""
    experiment_id = find_experiment(store, experiment)
    training = sorted((r for r in store.runs(experiment_id) if is_training_run(r)), key=lambda r: r.info.start_time)
    if not training:
        return Sweep(experiment_id, pd.DataFrame(columns=["run_id", "variant", "family", "lr", "seed", "outcome"]), 0)
    params = {r.info.run_id: recorded_params(r) for r in training}
    # The axes the sweeps named on their runs name the report's too (else a derived n_params could).
    named = {a for r in training for a in r.data.tags.get(VARIANT_AXES_TAG, "").split(",") if a}
    variants = find_variants(params, preferred=[key for a in named for key in naming_keys(a)])
    runs = pd.DataFrame([_row(store, r, variants, stale_after_s) for r in training])
    runs["lr_variant"] = [label_without(params[i], variants.axes, LR_KEY, str(v)) for i, v in zip(runs.run_id, runs.norm, strict=True)]
    runs["variant_rank"] = variant_ranks(runs, variants)
    # One run counts per config (its fingerprint, or for records without one its variant, learning
    # rate and seed): the latest with a result (finished or diverged), else the latest. A later run
    # cut short (Ctrl+C, a crash) does not hide a result it never replaced; a later result does, and
    # so does a run a sweep started in its place (SUPERSEDED_TAG: left out above).
    older = ["|".join(map(str, key)) for key in runs[RUN_KEY].itertuples(index=False)]
    same = runs.fingerprint.where(runs.fingerprint != "", pd.Series(older, index=runs.index))
    with_result = runs.outcome.isin(RESULT_OUTCOMES)
    by_preference = with_result.sort_values(kind="stable").index  # start order kept within each
    latest = runs.loc[by_preference][~same.loc[by_preference].duplicated(keep="last")]
    ordered = latest.sort_values(RUN_KEY).reset_index(drop=True)
    return Sweep(experiment_id, ordered, len(runs) - len(latest), variants.axes)


def latest_speed_check(store: Store, experiment_id: str) -> Run | None:
    """The experiment's latest finished bench-variants run (the speed check the report uses), or None."""
    found = store.runs(
        experiment_id,
        f"tags.`{BENCH_TAG}` = '{BENCH_VARIANTS}' and attributes.status = 'FINISHED'",
        ["attributes.start_time DESC"],
        most=1,
    )
    return found[0] if found else None


def _per_variant(metrics: dict[str, float], names: Sequence[str]) -> dict[str, tuple[float, ...]]:
    variants = {key.split("/", 1)[1] for key in metrics if key.startswith(f"{names[0]}/")}
    return {v: tuple(metrics.get(f"{m}/{v}", math.nan) for m in names) for v in variants}


SPEED_CHECK_ARTIFACT = "variants.json"  # the bench-variants run's per-round samples, load and dispatched kernels


class SpeedCheck(NamedTuple):
    """What the experiment's latest finished bench-variants run holds (each empty without one)."""

    check: dict[str, Any]  # its `variants.json`: per-round samples of steps and kernels, load, kernels run
    # Per variant, from its metrics: the step-time ratio to REFERENCE_VARIANT (median, low, high) ...
    interleaved: dict[str, tuple[float, float, float]]
    # ... and, when it timed no_norm too, the norm's own cost in ms (step - no_norm's step per round:
    # median, low, high) with the variant's median step in ms.
    norm_costs: dict[str, tuple[float, float, float, float]]


def load_speed_check(store: Store, experiment_id: str) -> SpeedCheck:
    """The latest finished bench-variants run of the experiment, read once (`SpeedCheck`)."""
    run = latest_speed_check(store, experiment_id)
    metrics = run.data.metrics if run else {}
    check = read_speed_check(store, run) if run else {}
    return SpeedCheck(check, _per_variant(metrics, RATIO_METRICS), _per_variant(metrics, NORM_COST_METRICS))  # type: ignore[arg-type]


def read_speed_check(store: Store, run: Run) -> dict[str, Any]:
    """A bench-variants run's `variants.json`; empty when it cannot be read."""
    try:
        return dict(json.loads(store.read_text(run.info.run_id, SPEED_CHECK_ARTIFACT)))
    except Exception:  # an older run without the file, a store that lost it: the report goes on without it
        return {}


def load_curves(store: Store, runs: pd.DataFrame) -> pd.DataFrame:
    """Step metrics of the given runs, long format: run_id, variant, variant_rank, family, seed, metric, step, value."""
    records = [
        (r.run_id, r.variant, r.variant_rank, r.family, r.seed, key, m.step, m.value)
        for r in runs.itertuples(index=False)
        for key in CURVE_METRICS
        for m in store.metric_history(r.run_id, key)
    ]
    columns = ["run_id", "variant", "variant_rank", "family", "seed", "metric", "step", "value"]
    return pd.DataFrame(records, columns=columns)


def tag_variants(store: Store, runs: pd.DataFrame, axes: Sequence[Axis]) -> None:
    """Tag each run whose recorded variant differs from the report's (an older run, a run of another
    sweep in the experiment) with the report's, so the MLflow UI groups runs as the report does."""
    for r in runs[runs.variant != runs.variant_tag].to_dict("records"):
        parts = {a.name: str(r[AXIS_PREFIX + a.name]) for a in axes}
        store.set_tags(str(r["run_id"]), variant_tags(str(r["variant"]), parts, axes))


def save_summary_run(store: Store, experiment_id: str, files: Iterable[Path]) -> str:
    """Log the report's files to the sweep's parent run: the running sweep's, or the experiment's
    latest; an experiment of single runs gets one `report` run of the same kind."""
    run_id = os.environ.get(PARENT_ENV)
    if run_id is None:
        latest = latest_sweep_run(store, experiment_id)
        run_id = latest.info.run_id if latest else None
    if run_id is None:
        tags = {SWEEP_TAG: "true", NOTE_TAG: "The sweep report of this experiment's runs."}
        run_id = store.create_run(experiment_id, REPORT_RUN_NAME, tags)
        store.terminate(run_id, "FINISHED")
    store.log_files(run_id, files, REPORT_ARTIFACT_DIR)
    return run_id
