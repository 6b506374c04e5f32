"""The verdict in MLflow's own columns: what each job's run carries so that the runs table can sort and
filter on the answer, not only show the numbers it was read from.

A job's run gets its variant's pair, the first of the report's pairs that measures it (b against a,
in the report's order: `hand_rmsnorm` against `hand_layernorm`, `torch_rmsnorm` against `hand_rmsnorm`);
a variant that only ever is a pair's reference (`no_norm`) says so. Per run:

- `loss_verdict` (tag): the pair's word first (`equivalent`, `different`, `inconclusive`, `untested`),
  then the reference and the interval the word was read from, so that `tags.loss_verdict LIKE
  'different%'` filters and a sort groups the words;
- `loss_vs_ref` with `pairs/loss_vs_ref_low|high` (metrics): the same difference in nats, at the
  report's printed precision, for a numeric sort;
- `speed_verdict` (tag): the speed check's word for the same variant against its pair's reference,
  with its 95% interval of step time.

The tag and metric names are src.tracking.summary's (the store side); the words are written here once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from src.report.words.numbers import NATS, decimals_for, estimate_text, shown
from src.report.words.speed import step_time_text
from src.stats.verdicts import PairWord
from src.tracking.summary import JOB_LOSS_BOUNDS, JOB_LOSS_METRIC, LOSS_VERDICT_TAG, SPEED_VERDICT_TAG

if TYPE_CHECKING:
    from src.report.analysis import Analysis
    from src.report.judge.pairs import Result
    from src.report.judge.speed import SpeedVerdict

REFERENCE_WORD = "reference"  # a variant only ever measured against, never measured


@dataclass
class JobColumns:
    """What one variant's job runs carry: tags (words) and metrics (numbers)."""

    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


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
    """variant -> its runs' verdict columns (loss pair and speed), for every variant the report judged."""
    out: dict[str, JobColumns] = {}
    for r in a.comparisons:
        if r.metric != "test_loss" or r.b in out and LOSS_VERDICT_TAG in out[r.b].tags:
            continue
        cols = out.setdefault(r.b, JobColumns())
        cols.tags[LOSS_VERDICT_TAG] = loss_cell(r)
        cols.metrics |= loss_metrics(r)
    for r in a.comparisons:  # a variant measured by no pair: the others' reference
        if r.a not in out:
            out[r.a] = JobColumns({LOSS_VERDICT_TAG: f"{REFERENCE_WORD}: the others' test loss is measured against it"})
    for v in a.speed_verdicts:
        cols = out.setdefault(v.b, JobColumns())
        cols.tags.setdefault(SPEED_VERDICT_TAG, speed_cell(v))
    return out
