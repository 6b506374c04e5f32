"""What the MLflow UI shows when a user opens an experiment from a link that normsweep prints.

MLflow 3.17's UI keeps its view of an experiment (columns, which runs the charts draw, grouping) in
the browser, with one exception a logging client can reach: a *shared view*, an experiment tag
`mlflow.sharedViewState.<key>` holding the view as JSON, applied when the page's address carries
`viewStateShareKey=<key>`. normsweep writes one such view on every experiment it touches, and every
link it prints carries its key and the training view (the UI picks GenAI or model training from the
address or the browser's own toggle, never from an experiment tag):

- every run drawn in the charts (MLflow's default draws the first 10, and a sweep's parent run
  takes one of them: a whole variant of a 12-job sweep went missing);
- runs grouped by their `variant` tag (what the sweep varied: `torch_layernorm · post`, written
  whole, src.tracking.variants), so each variant is one colour and its seeds are drawn as a mean
  with a min/max band (the UI's own aggregation);
- the results as columns on first open: test loss, the speed check's estimate of the variant's step
  time against the reference (each job carries its variant's), the outcome, the variant, the seed;
- the charts: loss curves on a log axis, then test loss and the speed estimate as one bar per variant;
  the jobs' own times (one after another: the machine's load) in a section of their own, last.

Keys the UI refuses to take from a shared view (which rows are unfolded, pinned or hidden) stay
the browser's. Torch-free.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from src.tracking.intervals import SECTION as INTERVALS
from src.tracking.intervals import interval_key, shown_generation, x_range
from src.tracking.store_uri import is_server, redact_uri
from src.tracking.summary import (
    JOB_LOSS_METRIC,
    JOB_SPEED_METRIC,
    JOB_SPEED_SECTION,
    LOSS_VERDICT_TAG,
    SORT_SECTION,
    SPEED_VERDICT_TAG,
)
from src.tracking.tags import (
    BENCH_TAG,
    BENCH_VARIANTS,
    NORM_FILE_HASH_TAG,
    NORM_TARGET_TAG,
    OUTCOME_TAG,
    SEED_TAG,
    SWEEP_TAG,
    VARIANT_TAG,
)

if TYPE_CHECKING:
    from src.tracking.store import Store

VIEW_KEY = "normsweep"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the UI's own prefix for a shared view
VIEW_TAG = VIEW_TAG_PREFIX + VIEW_KEY
# The saved view a fresh browser starts from (src/tracking/ui_app.py), under MLflow's own prefix, which
# the home page leaves out of an experiment's Tags column (it showed the view's raw JSON there).
START_VIEW_TAG = "mlflow.normsweep.startView"
OLD_START_VIEW_TAG = "normsweep.startView"  # where earlier versions wrote it: removed when the view is written
TRAINING_VIEW = {"workflowType": "machine_learning"}  # the UI's GenAI | Model training toggle
GROUP_TAG = VARIANT_TAG  # the run tag that names the variant (src.tracking.variants)
# Final one-off numbers, as the job logs them (src.training.run_life.final_metrics). Not the jobs' own
# tokens/s or training time: timed one after another or at once, they rank the machine's load (the
# speed per pair is the sweep run's, from its speed check).
# The speed column is the speed check's estimate each job carries (src.tracking.summary.log_job_speed).
# Nothing else: with MLflow's own columns (name, created, duration) these fit 1440 px unscrolled; the
# dataset, the final train loss and the rest are one click away (Columns).
RESULT_METRICS = ("test_loss", JOB_SPEED_METRIC)
RESULT_TAGS = (OUTCOME_TAG, VARIANT_TAG, SEED_TAG)
# Each number beside its verdict (src.report.words.columns): the words a user sorts and filters on, next
# to the figure they were read from; then the outcome, the variant and the seed.
RESULT_COLUMNS = (
    ("metrics", "test_loss"), ("tags", LOSS_VERDICT_TAG), ("metrics", JOB_SPEED_METRIC), ("tags", SPEED_VERDICT_TAG),
    *(("tags", t) for t in RESULT_TAGS),
)  # fmt: skip
# An experiment that swept a norm of the user's adds its class and file hash (src.training.run_spec), so a
# changed file shows in the list; the columns would stand empty for the built-ins alone.
USER_NORM_TAGS = (NORM_TARGET_TAG, NORM_FILE_HASH_TAG)
# The jobs' own times, one after another or at once on shared machines: on the record (each job's page, runs.csv),
# charted in a section of their own after the results, never as bars beside them.
ONE_AFTER_ANOTHER_METRICS = ("train_time_s", "avg_tokens_per_sec", "avg_tokens_per_sec_after_first_step")
SHOW_ALL_RUNS = "SHOW_ALL"  # the UI's runsHiddenMode that draws every run in the charts
HIDE_LISTED = "CUSTOM"  # the UI's runsHiddenMode that hides exactly the runs in `runsHidden`


def column(kind: str, name: str) -> str:
    """A runs-table column as the UI names it: kind.`name` (kind: attributes, metrics, params, tags)."""
    return f"{kind}.`{name}`"


# The chart view's sections in this order (MLflow's own: alphabetical, so `perf` and the speed check's
# bars came before the loss curves): the curves, then the one-off results, then the sweep's
# aggregates and the rest; and in each of the first three its loss first. A metric named
# `<section>/<name>` is in `<section>`; one without a slash in MLflow's "Model metrics", system
# metrics in its "System metrics".
MODEL_METRICS, SYSTEM_METRICS = "Model metrics", "System metrics"
# A section of our own. One view serves every sweep of the experiment, so its title does not say whether
# the jobs ran one after another or at once (the report's table does: src.report.words.jobs).
ONE_AFTER_ANOTHER = "jobs' own times (machine load, not the norms' speed)"
CHART_SECTIONS = ("train", "val", MODEL_METRICS, INTERVALS, JOB_SPEED_SECTION, "sweep", "perf", ONE_AFTER_ANOTHER, SYSTEM_METRICS,
                  SORT_SECTION)  # fmt: skip
# Sections folded shut: the verdicts' sort keys are numbers for the runs table's Sort menu, not results to chart.
FOLDED = (SORT_SECTION,)
# The charts each section starts with (the UI adds a metric with no card of its own to its section,
# after these; a metric that has a card here stays where it is put). The losses on a log axis: one
# variant's spike (no_norm's ~17 nats) would otherwise flatten the others' curves into one line.
LEADING_CHARTS = (
    ("train", "train/train_loss", "LINE"),
    ("val", "val/val_loss", "LINE"),
    (MODEL_METRICS, "test_loss", "BAR"),
    # MLflow draws a bar from 0 (no axis range to set on a bar card): test losses of 6.17 and 6.28 look alike
    # there, so each job's gap to the report's reference, which reads from 0, is drawn beside them.
    (MODEL_METRICS, JOB_LOSS_METRIC, "BAR"),
    (MODEL_METRICS, JOB_SPEED_METRIC, "BAR"),  # every variant's speed estimate, one bar each
    # The same two estimates with their 95% intervals: a segment per variant (src.tracking.intervals).
    *((INTERVALS, interval_key(key), "LINE") for key in (JOB_LOSS_METRIC, JOB_SPEED_METRIC)),
    *((ONE_AFTER_ANOTHER, key, "BAR") for key in ONE_AFTER_ANOTHER_METRICS),
)
LOG_AXIS = ("train/train_loss", "val/val_loss")
# The UI's own defaults of a line chart's settings (its card is read as stored, not completed).
LINE_CARD = {"selectedMetricKeys": None, "lineSmoothness": 0, "xAxisScaleType": "linear", "scaleType": "linear",
             "range": {}, "xAxisKey": "step", "selectedXAxisMetricKey": "", "yAxisKey": "metric", "yAxisExpressions": [],
             "ignoreOutliers": False, "useGlobalXaxisKey": True, "useGlobalLineSmoothing": True}  # fmt: skip


# Cards per row and their height by section. MLflow's three a row, 360 px, gave a legend two lines that named
# 2 or 3 of 5 variants; two a row name 5 under a bar chart, and the interval charts, whose legend names each
# variant with its metric, take a row each.
SECTION_CARDS = {name: {"columns": 2, "cardHeight": 420} for name in ("train", "val", MODEL_METRICS)} | {INTERVALS: {"columns": 1}}
# A card draws its first `runsCountToCompare` runs (MLflow's default: 10, so a 15-job sweep's bars and legend
# named 10 of them): every job of any sweep normsweep runs on one machine.
RUNS_CHARTED = 1000


def chart_layout(intervals: tuple[int, int] | None = None) -> dict[str, object]:
    """The chart view's sections in CHART_SECTIONS' order, as the UI keeps a layout a user reordered
    (new metrics join their section, after the leading charts; a section not listed follows);
    `intervals`: the interval charts' generation and variants shown (src.tracking.intervals)."""
    uuid = {name: f"{VIEW_KEY}-section-{i}" for i, name in enumerate(CHART_SECTIONS)}
    leading = {section for section, _, _ in LEADING_CHARTS}
    sections = [{"uuid": uuid[name], "name": name, "display": name not in FOLDED, "deleted": False, "isGenerated": True,
                 "isReordered": name in leading, **SECTION_CARDS.get(name, {})}
                for name in CHART_SECTIONS]  # fmt: skip
    charts = [{"uuid": f"{VIEW_KEY}-chart-{key}", "type": kind, "runsCountToCompare": RUNS_CHARTED, "deleted": False, "isGenerated": True,
               "metricSectionId": uuid[section], "metricKey": key, "displayName": key.rpartition("/")[2],
               **(_line_card(key, intervals) if kind == "LINE" else {})} for section, key, kind in LEADING_CHARTS]  # fmt: skip
    return {"compareRunSections": sections, "compareRunCharts": charts, "isAccordionReordered": True}


def _line_card(key: str, intervals: tuple[int, int] | None) -> dict[str, object]:
    card: dict[str, object] = {**LINE_CARD, "scaleType": "log" if key in LOG_AXIS else "linear"}
    if key.startswith(f"{INTERVALS}/"):
        # The newest generation's block of steps only (an older one holds intervals a report replaced), and
        # its title says what the segments are: the step axis only places the variants side by side.
        card["displayName"] = f"{key.partition('/')[2]}: 95% interval per variant (low, estimate, high)"
        if intervals is not None:
            card["range"] = x_range(*intervals)
    return card


# The runs table's columns in this order and at these widths (px; MLflow gives every column 100, so a verdict
# read "inconclusiv…"): MLflow's own first (narrowed), each number beside its verdict, wide enough for the
# word and its reference, then the rest. At 1440 px the verdicts are on screen; the variant and the seed
# (in the run's name and its group) are a scroll away.
COLUMN_WIDTHS = (
    (column("attributes", "Run Name"), 190), ("runDateAndNestInfo", 130), ("duration", 65),
    (column("metrics", "test_loss"), 90), (column("tags", LOSS_VERDICT_TAG), 215),
    (column("metrics", JOB_SPEED_METRIC), 105), (column("tags", SPEED_VERDICT_TAG), 205),
    (column("tags", OUTCOME_TAG), 75), (column("tags", VARIANT_TAG), 130), (column("tags", SEED_TAG), 50),
)  # fmt: skip


def column_layout() -> dict[str, object]:
    """The runs table's column order and widths (COLUMN_WIDTHS), as the UI keeps a user's resized columns."""
    return {"columnOrder": [c for c, _ in COLUMN_WIDTHS], "columnWidths": dict(COLUMN_WIDTHS)}


def view_state(user_norms: bool = False, intervals: tuple[int, int] | None = None) -> dict[str, object]:
    """The shared view: result columns first, every run charted, runs grouped (and coloured) by variant;
    `user_norms`: the experiment swept a norm of the user's, whose class and file hash are columns too;
    `intervals`: the interval charts' generation and variants (src.tracking.intervals)."""
    return {
        "selectedColumns": [
            *(column(kind, name) for kind, name in RESULT_COLUMNS),
            *(column("tags", t) for t in (USER_NORM_TAGS if user_norms else ())),
        ],
        **column_layout(),
        "runsHiddenMode": SHOW_ALL_RUNS,
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": GROUP_TAG}]},
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        **chart_layout(intervals),
    }


def start_view_state(
    sweep_runs: list[str], without_curves: list[str] | None = None, user_norms: bool = False,
    intervals: tuple[int, int] | None = None,
) -> dict[str, object]:  # fmt: skip
    """The view a browser starts from when it opens the experiment without a link (src/tracking/ui_app.py
    puts it in the browser's storage): ungrouped, so each sweep run is one row with its jobs unfolded
    under it, with the same result columns; every training run charted, and the runs that draw no
    curve (`without_curves`: the sweep runs and their speed checks) left out of the charts and their
    legends (the UI takes which runs are hidden from a saved view, never from a shared one)."""
    shared = view_state(user_norms, intervals)
    hidden = list(without_curves or [])
    return {
        "selectedColumns": shared["selectedColumns"],
        **column_layout(),
        "runsExpanded": dict.fromkeys(sweep_runs, True),
        # CUSTOM: exactly `runsHidden` are hidden; the visibility map is what newer UIs read instead.
        "runsHiddenMode": HIDE_LISTED if hidden else SHOW_ALL_RUNS,
        "runsHidden": hidden,
        "runsVisibilityMap": dict.fromkeys(hidden, False),
        "hideEmptyCharts": True,
        **chart_layout(intervals),
    }


def publish_view(store: Store, experiment_id: str) -> None:
    """Write the shared view and the start view on the experiment (idempotent: unchanged views are
    not rewritten)."""
    sweeps = [r.info.run_id for r in store.runs_tagged(experiment_id, SWEEP_TAG, "true")]
    checks = [r.info.run_id for r in store.runs_tagged(experiment_id, BENCH_TAG, BENCH_VARIANTS)]
    user_norms = bool(store.runs(experiment_id, f"tags.`{NORM_TARGET_TAG}` != ''", most=1))
    tags = store.experiment_tags(experiment_id)
    shown = shown_generation(tags)
    views = ((VIEW_TAG, view_state(user_norms, shown)), (START_VIEW_TAG, start_view_state(sweeps, [*sweeps, *checks], user_norms, shown)))
    for key, state in views:
        value = json.dumps(state, separators=(",", ":"))
        if tags.get(key) != value:
            store.set_experiment_tag(experiment_id, key, value)
    if OLD_START_VIEW_TAG in tags:
        store.delete_experiment_tag(experiment_id, OLD_START_VIEW_TAG)


def default_workers() -> int:
    """One UI worker per two usable cores: MLflow starts 4, which on a 2-core machine got two of them
    killed at start and kept the UI from answering for about two minutes."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def ui_base(logger: Mapping[str, Any]) -> str:
    """http://host:port of the MLflow UI for the store of `logger` (the config's `logger` node): a
    tracking server is its own UI; a local store is served by `python -m src.ui` at `logger.ui`."""
    uri = str(logger.get("tracking_uri") or "")
    if is_server(uri):
        return redact_uri(uri).rstrip("/")
    ui = logger["ui"]
    return address(str(ui["host"]), int(ui["port"]))


def address(host: str, port: int) -> str:
    """The address a browser uses for a server bound to `host`: every interface means this host's name."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{port}"


def ui_link(base: str, experiment_id: str | None = None, run_id: str | None = None) -> str:
    """An address in the MLflow UI at `base` (http://host:port): the experiment list, an experiment
    in the shared view, or one run's page; always on the training view."""
    if experiment_id is None:
        return f"{base}/#/experiments?{urlencode(TRAINING_VIEW)}"
    if run_id is not None:
        return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{urlencode(TRAINING_VIEW)}"
    query = {**TRAINING_VIEW, "viewStateShareKey": VIEW_KEY}
    return f"{base}/#/experiments/{experiment_id}/runs?{urlencode(query)}"
