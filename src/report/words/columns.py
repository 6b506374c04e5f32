"""The verdict in MLflow's own columns: what each job's run carries so that the runs table can sort and
filter on the answer, not only show the numbers it was read from (each column, and the one reference
it is against: docs/mlflow-ui.md, "The verdict in the columns"). A tag's word comes first, so that
`tags.loss_verdict LIKE 'different%'` filters; each word's place in LOSS_ORDER / SPEED_ORDER is a
metric as well, because MLflow's runs table sorts metrics and params, never tags. The tag and metric
names are src.tracking.summary's (the store side); the words are written here once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from src.report.numbers import NATS, decimals_for, estimate_text, shown
from src.report.words.speed import step_time_text
from src.stats.verdicts import PairWord, SpeedWord
from src.tracking.summary import (
    JOB_LOSS_BOUNDS,
    JOB_LOSS_METRIC,
    JOB_SPEED_METRIC,
    JOB_SPEED_SECTION,
    LOSS_SORT_METRIC,
    LOSS_VERDICT_TAG,
    SPEED_SORT_METRIC,
    SPEED_VERDICT_TAG,
    job_speed_metrics,
)

if TYPE_CHECKING:
    from src.report.analysis import Analysis
    from src.report.judge.pairs import Result
    from src.report.judge.speed import SpeedVerdict

REFERENCE_WORD = "reference"  # the variant the others are measured against
# The order a sort by `sort/loss_verdict` / `sort/speed_verdict` gives the words (a word's number is its
# place here): the reference, then from like it to unlike it, then what could not be told.
LOSS_ORDER = (REFERENCE_WORD, PairWord.EQUIVALENT, PairWord.INCONCLUSIVE, PairWord.DIFFERENT, PairWord.UNTESTED)
SPEED_ORDER = (REFERENCE_WORD, SpeedWord.EQUIVALENT, SpeedWord.FASTER, SpeedWord.SLOWER, SpeedWord.UNRESOLVED)
LOSS_REFERENCE_CELL = f"{REFERENCE_WORD}: the others' test loss is measured against it"
SPEED_REFERENCE_CELL = f"{REFERENCE_WORD}: the others' step time is measured against it"


@dataclass
class JobColumns:
    """What one variant's job runs carry: tags (words) and metrics (numbers)."""

    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # result -> low, estimate, high


def loss_cell(r: Result) -> str:
    """`different vs hand_layernorm: Δ +0.0123 [+0.0040, +0.0206] (95% interval) nats of test loss`."""
    d, p = r.decision, r.primary
    if r.verdict == PairWord.UNTESTED or d is None:
        gap = f"Δ {shown(p.diff, NATS)} nats, " if math.isfinite(p.diff) else ""
        return f"{PairWord.UNTESTED} vs {r.a}: {gap}{r.reason or 'no spread to test with'}"
    return f"{r.verdict} vs {r.a}: Δ {estimate_text(p.diff, d.low, d.high, d.level, NATS, spread=d.spread)} nats of test loss"


def loss_metrics(r: Result) -> dict[str, float]:
    """The pair's difference and the ends of the interval its word was read from, in nats, rounded as printed."""
    d, diff = r.decision, r.primary.diff
    low, high = (d.low, d.high) if d is not None and d.spread else (math.nan, math.nan)
    places = decimals_for(NATS, diff, low, high)
    values = {JOB_LOSS_METRIC: diff, f"{JOB_LOSS_BOUNDS}_low": low, f"{JOB_LOSS_BOUNDS}_high": high}
    return {k: round(v, places) for k, v in values.items() if math.isfinite(v)}


def speed_cell(v: SpeedVerdict) -> str:
    """`faster vs torch_layernorm: step time -1.2% [-1.5%, -0.9%] (95% interval), the norms' kernels`."""
    return f"{v.verdict} vs {v.a}: step time {step_time_text(v.predicted)}, from the norms' kernels"


def job_columns(a: Analysis) -> dict[str, JobColumns]:
    """variant -> its runs' verdict columns: its loss and its speed against the report's references
    (`Analysis.reference_comparisons`, `.reference_speed`), for every variant they judged."""
    out: dict[str, JobColumns] = {}
    for r in a.reference_comparisons:
        out.setdefault(r.a, JobColumns({LOSS_VERDICT_TAG: LOSS_REFERENCE_CELL}, {JOB_LOSS_METRIC: 0.0, LOSS_SORT_METRIC: 0.0},
                                       {JOB_LOSS_METRIC: (0.0, 0.0, 0.0)}))  # fmt: skip
        cols = out.setdefault(r.b, JobColumns())
        cols.tags[LOSS_VERDICT_TAG] = loss_cell(r)
        cols.metrics |= {**loss_metrics(r), LOSS_SORT_METRIC: float(LOSS_ORDER.index(r.verdict))}
        ends = [cols.metrics.get(f"{JOB_LOSS_BOUNDS}_{end}") for end in ("low", "high")]
        if None not in ends:  # an interval to draw (not an untested pair's)
            cols.intervals[JOB_LOSS_METRIC] = (ends[0], cols.metrics[JOB_LOSS_METRIC], ends[1])
    for v in a.reference_speed:
        reference = out.setdefault(v.a, JobColumns())
        reference.tags[SPEED_VERDICT_TAG] = SPEED_REFERENCE_CELL
        reference.metrics[SPEED_SORT_METRIC] = 0.0
        cols = out.setdefault(v.b, JobColumns())
        cols.tags[SPEED_VERDICT_TAG] = speed_cell(v)
        cols.metrics[SPEED_SORT_METRIC] = float(SPEED_ORDER.index(v.verdict))
    speed = a.speed_estimates()
    for variant, (change, low, high) in (speed[1] if speed else {}).items():  # the step_vs_ref_pct bars' intervals
        shown = job_speed_metrics(change, low, high)
        bounds = f"{JOB_SPEED_SECTION}/{JOB_SPEED_METRIC}"
        out.setdefault(variant, JobColumns()).intervals[JOB_SPEED_METRIC] = (
            shown[f"{bounds}_low"], shown[JOB_SPEED_METRIC], shown[f"{bounds}_high"])  # fmt: skip
    return out
