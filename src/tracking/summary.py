"""The sweep's answer on its parent run, where the MLflow UI shows it without opening a file.

- per variant, aggregate metrics: mean, 95% CI bounds and seeds of test loss,
  named `sweep/<variant>.<metric>.<stat>` (the variant as `variants.metric_key` spells it:
  `sweep/torch_layernorm-post.test_loss.mean`) so that the run's metric list sorts by variant and the
  chart view keeps them in one section (`sweep`), logged at step 0 (drawn as bars), and only
  when they changed since the last report;
- per pair timed by the speed check, its speed estimate (`sweep/<b>_vs_<a>.step_time.change` and
  its 95% interval): the number its speed verdict reads;
- the per-variant table and the paired comparisons as MLflow tables (`report/*.json`, which the
  artifact viewer shows as grids);
- the verdict sentences as the run's description (its Overview), kept when the sweep's end
  rewrites the description with the job counts;
- the sweep's definition as params: every key whose value differs between the jobs, with its values;
- on each job's run, its variant's speed estimate against the reference (`log_job_speed`): a column
  of the runs table and one chart comparing the variants.

Torch-free; `store` is the job's or the report's open store (src.tracking.store.Store).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from src.tracking.tags import NOTE_TAG
from src.tracking.variants import metric_key

if TYPE_CHECKING:
    import pandas as pd

    from src.tracking.store import Store

# One-off results (a job's test loss and tokens/s, the sweep's aggregates) are logged at step 0: MLflow
# 3.17's chart view draws a metric that no run has at a step >= 1 as bars, one value per run, and a
# metric logged at a later step as a single-dot line on the step axis.
SUMMARY_STEP = 0
SECTION = "sweep"  # the chart view's section of the parent's aggregates
# The verdict text, kept apart so the end-of-sweep note can repeat it; under MLflow's own prefix, which
# the UI leaves out of a run's tag chips (a chip of several thousand characters showed no key).
VERDICT_TAG = "mlflow.normsweep.verdict"
OLD_VERDICT_TAG = "normsweep.verdict"  # where sweeps recorded before kept it


def stored_verdict(tags: Mapping[str, str]) -> str | None:
    """The verdict a report left on a sweep run (under either name)."""
    return tags.get(VERDICT_TAG) or tags.get(OLD_VERDICT_TAG)
# report column -> name in the aggregate's key; few, since every key is one more chart in the UI. Not
# tokens/s: the jobs' own, timed one after another or at once, rank the machine's load; speed is per pair below.
AGGREGATED = {"test_loss": "test_loss"}
SPEED_METRIC = "step_time"  # a pair's speed estimate: `sweep/<b>_vs_<a>.step_time.{change,ci_low,ci_high}`
TABLES = {"variants": "report/variants.json", "comparisons": "report/comparisons.json"}
# On each job's run, its variant's speed-check estimate: step time against the reference variant's,
# in percent (the change the pairs' verdicts read, src.report.judge.speed.pair_estimate), so the runs table
# has it as a column and one chart of the job runs compares every variant. Its 95% interval beside it.
# (A short name: MLflow's runs table gives a metric column ~100 px, and the result columns then fit 1440 px.)
JOB_SPEED_METRIC = "step_vs_ref_pct"
JOB_SPEED_SECTION = "speed_check"  # the interval's bounds: `speed_check/step_vs_ref_pct_{low,high}`
JOB_SPEED_DECIMALS = 2  # hundredths of a percent: the check resolves no finer, and the column shows it whole
JOB_SPEED_TAG = "speed_check.estimate"  # the same in words: `+0.4% [+0.3%, +0.5%] vs torch_layernorm (...)`
# On each job's run, its variant's verdicts as the report judged them (src.report.words.columns writes
# them): tags that start with the word, so the runs table's search filters on it
# (`tags.loss_verdict LIKE 'different%'`), and the loss difference with its interval as metrics.
LOSS_VERDICT_TAG = "loss_verdict"
SPEED_VERDICT_TAG = "speed_verdict"
JOB_LOSS_METRIC = "loss_vs_ref"  # nats of test loss against the report's loss reference
JOB_LOSS_BOUNDS = "pairs/loss_vs_ref"  # the interval's ends: `pairs/loss_vs_ref_{low,high}`
# MLflow's runs table sorts metrics and params, never tags: each verdict's word as its place in the words'
# order (src.report.words.columns). A metric, not a param: a report made again may change a word, and a
# param is written once.
SORT_SECTION = "sort"
LOSS_SORT_METRIC = f"{SORT_SECTION}/{LOSS_VERDICT_TAG}"
SPEED_SORT_METRIC = f"{SORT_SECTION}/{SPEED_VERDICT_TAG}"


def job_speed_metrics(change: float, low: float, high: float) -> dict[str, float]:
    """A job's speed metrics from its variant's relative step-time change against the reference."""
    bounds = f"{JOB_SPEED_SECTION}/{JOB_SPEED_METRIC}"
    values = {JOB_SPEED_METRIC: change, f"{bounds}_low": low, f"{bounds}_high": high}
    return {k: round(100 * v, JOB_SPEED_DECIMALS) for k, v in values.items()}


def log_job_speed(store: Store, jobs: Iterable[tuple[str, str]], estimates: Mapping[str, tuple[float, float, float]], reference: str) -> int:
    """Each job run (run id, variant) of a variant the speed check timed gets that variant's estimate
    (`estimates`: variant -> relative change, low, high against `reference`) as metrics and a tag;
    the number of runs written. Logged at SUMMARY_STEP (a bar per run in the chart view); a run that
    already holds the same estimate is left as it is."""
    written = 0
    for run_id, variant in jobs:
        if variant not in estimates:
            continue
        change, low, high = estimates[variant]
        metrics = job_speed_metrics(change, low, high)
        run = store.get_run(run_id)
        if run is not None and all(run.data.metrics.get(k) == v for k, v in metrics.items()):
            continue
        store.log_metrics(run_id, metrics, step=SUMMARY_STEP)
        words = "ref" if variant == reference else f"{change:+.1%} [{low:+.1%}, {high:+.1%}] vs {reference}"
        store.set_tags(run_id, {JOB_SPEED_TAG: f"{words} (step time, the sweep's speed check: its norms' kernels, interleaved)"})
        written += 1
    return written


def log_job_columns(
    store: Store, jobs: Iterable[tuple[str, str]], columns: Mapping[str, tuple[Mapping[str, str], Mapping[str, float]]]
) -> int:
    """Each job run (run id, variant) gets its variant's verdict columns (`columns`: variant -> tags,
    metrics), at the sweep's end where the verdicts are known; the number of runs written. A run that
    already holds the same values is left as it is (a report made again adds no second row)."""
    written = 0
    for run_id, variant in jobs:
        if variant not in columns:
            continue
        tags, metrics = columns[variant]
        run = store.get_run(run_id)
        held = (run.data.tags, run.data.metrics) if run is not None else ({}, {})
        new_tags = {k: v for k, v in tags.items() if held[0].get(k) != v}
        new_metrics = {k: v for k, v in metrics.items() if held[1].get(k) != v}
        if new_tags:
            store.set_tags(run_id, new_tags)
        if new_metrics:
            store.log_metrics(run_id, new_metrics, step=SUMMARY_STEP)
        written += bool(new_tags or new_metrics)
    return written


def aggregate_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """`sweep/<variant>.<metric>.{mean,ci_low,ci_high}` and `sweep/<variant>.n_seeds` from the report's
    per-variant rows (`variant`, `finished`, `<metric>`, `<metric>_ci`: mean and CI half-width)."""
    out: dict[str, float] = {}
    for row in rows:
        prefix = f"{SECTION}/{metric_key(str(row['variant']))}"
        out[f"{prefix}.n_seeds"] = float(row["finished"])
        for column, name in AGGREGATED.items():
            mean, half = float(row[column]), float(row[f"{column}_ci"])
            if math.isnan(mean):
                continue  # no finished run: nothing to show rather than a NaN bar
            out[f"{prefix}.{name}.mean"] = mean
            if not math.isnan(half):  # one seed has no interval
                out[f"{prefix}.{name}.ci_low"] = mean - half
                out[f"{prefix}.{name}.ci_high"] = mean + half
    return out


def pair_speed_metrics(estimates: Iterable[tuple[str, str, float, float, float]]) -> dict[str, float]:
    """`sweep/<b>_vs_<a>.step_time.{change,ci_low,ci_high}` per pair (a, b, change, low, high): b's step
    time against a's as a relative change, the speed check's estimate that the pair's verdict reads."""
    out: dict[str, float] = {}
    for a, b, change, low, high in estimates:
        prefix = f"{SECTION}/{metric_key(b)}_vs_{metric_key(a)}.{SPEED_METRIC}"
        out |= {f"{prefix}.change": change, f"{prefix}.ci_low": low, f"{prefix}.ci_high": high}
    return out


def sweep_params(jobs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """`sweep.<key>`: the values of every override that differs between the jobs, in job order."""
    values: dict[str, list[str]] = {}
    for job in jobs:
        for override in job.get("overrides", []):
            key, _, value = str(override).partition("=")
            seen = values.setdefault(key.lstrip("+~"), [])
            if value not in seen:
                seen.append(value)
    return {f"sweep.{key}": ",".join(vals) for key, vals in values.items() if len(vals) > 1}


def log_sweep_definition(store: Store, run_id: str, jobs: Sequence[Mapping[str, Any]]) -> None:
    """The swept keys and their values as params of a new sweep run (params are write-once)."""
    store.log_params(run_id, {**sweep_params(jobs), "sweep.n_jobs": len(jobs)})


# MLflow cuts a tag's value at 8,000 characters (mlflow.utils.validation.MAX_TAG_VAL_LENGTH), with no
# more than a logged warning; the verdict keeps this much, leaving the rest for the note's jobs sentence.
VERDICT_MAX = 7_000


def sweep_note(jobs_sentence: str, verdict: str | None) -> str:
    """The sweep run's description: the verdict first (what the user came for), then the jobs."""
    return f"{verdict}\n\n{jobs_sentence}" if verdict else jobs_sentence


def log_sweep_summary(
    store: Store,
    run_id: str,
    rows: Iterable[Mapping[str, Any]],
    variants: pd.DataFrame,
    comparisons: pd.DataFrame,
    verdict: str,
    speed: Mapping[str, float] | None = None,
) -> None:
    """Aggregates, tables and the verdict on the sweep run `run_id`.

    `rows`: the report's per-variant numbers (see `aggregate_metrics`); `variants`: the same table
    as the report shows it; `comparisons`: one row per pair and metric; `verdict`: markdown, the
    description's first part; `speed`: the pairs' speed estimates (`pair_speed_metrics`).
    """
    stored = store.get_run(run_id)
    # Only what changed: a report made again over the same runs (a re-run of a finished sweep) adds
    # no second row of the same numbers.
    previous = stored.data.metrics if stored is not None else {}
    metrics = {k: v for k, v in {**aggregate_metrics(rows), **(speed or {})}.items() if previous.get(k) != v}
    store.log_metrics(run_id, dict(sorted(metrics.items())), step=SUMMARY_STEP)
    store.log_table(run_id, variants, TABLES["variants"])
    if not comparisons.empty:
        store.log_table(run_id, comparisons, TABLES["comparisons"])
    run = store.get_run(run_id)
    tags = run.data.tags if run is not None else {}
    note, previous = tags.get(NOTE_TAG, ""), stored_verdict(tags)
    if previous and note.startswith(previous):  # a report made again replaces its own verdict
        note = note[len(previous) :].lstrip()
    store.set_tags(run_id, {VERDICT_TAG: verdict, NOTE_TAG: sweep_note(note, verdict)})
    if OLD_VERDICT_TAG in tags:  # its chip in the UI showed no key
        store.delete_tag(run_id, OLD_VERDICT_TAG)
