"""An event: b alone does something the others do not (its loss goes NaN). Its effect is a count of
runs, not an interval: src.report.judge.study counts the runs that trained through or diverged, and
src.stats.verdicts' `judge_event` reads them by Fisher's exact test. It has no size and no `a`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from src.report.kinds.base import At, ClaimKind, verdicts
from src.report.numbers import p_text, settle_text
from src.tracking.tags import DIVERGED, RESULT_OUTCOMES

if TYPE_CHECKING:
    import pandas as pd

    from src.report.judge.study import Divergence, Finding
    from src.report.read.claims import Part
    from src.stats.verdicts import Judgement

FISHER = "Fisher's exact p"


class Event(ClaimKind):
    name = "event"
    paired = False
    sequential = False
    banded = False

    def check_a(self, part: Part, metric: str) -> None:
        if part.a is not None:
            raise At("a", "an event is of b alone (whether its loss went NaN); remove a")

    def check_size(self, metric: str, low: float, high: float) -> None:
        raise At("size", "an event has no size; remove size")

    def band(self, part: Part, metric: str) -> tuple[float, float]:
        return math.nan, math.nan  # a count of runs, held against no band

    def reason(self, f: Finding, j: Judgement) -> str:
        return divergence_reason(j, f.divergence, f.part.noun)  # type: ignore[arg-type]


def steps_text(runs: pd.DataFrame) -> str:
    """` (step 530 each)`, ` (steps 23, 25)`: where the diverged runs stopped."""
    steps = sorted(int(s) for s in runs[runs.outcome == DIVERGED].stopped_at_step.dropna())
    if not steps:
        return ""
    if len(set(steps)) == 1:
        return f" (step {steps[0]:,}{' each' if len(steps) > 1 else ''})"
    return f" (steps {', '.join(f'{s:,}' for s in steps)})" if len(steps) <= 5 else f" (steps {steps[0]:,}–{steps[-1]:,})"


def _left_out(who: str, frame: pd.DataFrame) -> str:
    if not len(frame):
        return ""
    steps = sorted({int(s) for s in frame.steps_done.dropna()})
    at = f" at step {', '.join(f'{s:,}' for s in steps[:3])}{'…' if len(steps) > 3 else ''}" if steps else ""
    return f"{who} {len(frame)} {'/'.join(sorted(set(frame.outcome.astype(str))))} run(s){at}, which neither trained through nor diverged"


def divergence_reason(j: Judgement, d: Divergence, noun: str) -> str:
    """The divergence claim's reason, written from what decided it (`j.because`) with the counts."""
    Because = verdicts().Because  # noqa: N806  (the verdict rule's enum, imported when a reason is written)
    b, event = d.b, d.event
    if j.because == Because.NO_NORMALIZED:
        return f"no normalized variant of {noun}'s trained beside it"
    if j.because == Because.NOT_LIKE_FOR_LIKE:
        own, theirs = (", ".join(f"{x:g}" for x in lrs) for lrs in d.learning_rates)
        return f"{b} at lr {own}, the normalized variants at {theirs}: not like for like"
    seen = f"{b} diverged in {event.k}/{event.n} runs{steps_text(d.runs)}, the normalized variants in {event.k_others}/{event.n_others}{steps_text(d.counted)}"
    whose = "the study's no-norm" if noun == "the study" else f"{noun}'s {d.b}"
    nan_by = f"step {d.study_step:.0f}, by which {whose} loss was NaN"
    if not math.isfinite(d.study_step):  # a claim with no step of its own: the steps it says a collapse takes, or none
        nan_by = f"the {d.collapse} steps it says a collapse typically takes" if d.collapse else ""
    reason = {
        Because.NONE_COUNTS: f"none of {b + chr(39) + 's' if not event.n else 'the normalized variants' + chr(39)} runs counts",
        Because.TRAINED_WHERE_OTHERS_DIVERGED: f"{seen}: {b} trained where they diverged",
        Because.TRAINED_PAST_STUDY: f"no NaN in {d.most:.0f} steps" + (f", past {nan_by}" if nan_by else ""),
        Because.TRAINED_TOO_SHORT: f"trained {d.most:.0f} steps, short of {nan_by or 'no step claimed'}"
                                   + (f" (it says training typically collapses within about {d.collapse})" if d.collapse else ""),
        Because.BEYOND_CHANCE: f"{seen}: more often than chance allows ({p_text(event.p, FISHER)})",
        Because.AS_OFTEN: f"{seen}: as often, so the divergence is not the missing norm's",
    }.get(j.because)
    if reason is None:  # too few: the seeds that would settle it are more than those run (src.report.judge.study.event_settle)
        seeds = settle_text(j.settle, "seeds per variant").removesuffix(" would settle it")
        reason = (f"{seen}: too few runs to tell that from chance ({p_text(event.p, FISHER)}); {seeds} would settle it "
                  f"if {b} diverged in each further run and the others in none")  # fmt: skip
    left = [_left_out(who, frame[~frame.outcome.isin(RESULT_OUTCOMES)]) for who, frame in (("no_norm's", d.runs), ("the normalized variants'", d.normalized))]
    if len(d.short):
        left.append(f"the normalized variants' {len(d.short)} run(s) that finished before step {d.first:,.0f}, where no_norm diverged")
    left = [x for x in left if x]
    return reason + (f"; left out: {'; '.join(left)}" if left else "")
