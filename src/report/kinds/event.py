"""An event: b alone does something the others do not (its loss goes NaN). Its effect is a count of
runs, not an interval: `Divergence` counts the runs that trained through or diverged, src.stats.verdicts'
`judge_event` reads them by Fisher's exact test, and this kind says why. It has no size and no `a`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from src.report.kinds.base import At, ClaimKind, verdicts
from src.report.kinds.metrics import STABILITY
from src.report.numbers import p_text, settle_text
from src.tracking.tags import DIVERGED, RESULT_OUTCOMES

if TYPE_CHECKING:
    import pandas as pd

    from src.report.judge.study import Finding
    from src.report.read.claims import Part
    from src.stats.verdicts import Event as Counts
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
        """The divergence claim's reason, written from what decided it (`j.because`) with the counts."""
        Because = verdicts().Because  # noqa: N806  (the verdict rule's enum, imported when a reason is written)
        d, noun, study_step = f.divergence, f.part.noun, f.part.published(STABILITY)
        b, event = d.b, d.event
        if j.because == Because.NO_NORMALIZED:
            return f"no normalized variant of {noun}'s trained beside it"
        if j.because == Because.NOT_LIKE_FOR_LIKE:
            own, theirs = (", ".join(f"{x:g}" for x in lrs) for lrs in d.learning_rates)
            return f"{b} at lr {own}, the normalized variants at {theirs}: not like for like"
        seen = f"{b} diverged in {event.k}/{event.n} runs{steps_text(d.runs)}, the normalized variants in {event.k_others}/{event.n_others}{steps_text(d.counted)}"
        whose = "the study's no-norm" if noun == "the study" else f"{noun}'s {d.b}"
        nan_by = f"step {study_step:.0f}, by which {whose} loss was NaN"
        if not math.isfinite(study_step):  # a claim with no step of its own: the steps it says a collapse takes, or none
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
        if reason is None:  # too few: the seeds that would settle it are more than those run (Divergence.judge)
            seeds = settle_text(j.settle, "seeds per variant").removesuffix(" would settle it")
            reason = (f"{seen}: too few runs to tell that from chance ({p_text(event.p, FISHER)}); {seeds} would settle it "
                      f"if {b} diverged in each further run and the others in none")  # fmt: skip
        left = [_left_out(who, frame[~frame.outcome.isin(RESULT_OUTCOMES)]) for who, frame in (("no_norm's", d.runs), ("the normalized variants'", d.normalized))]
        if len(d.short):
            left.append(f"the normalized variants' {len(d.short)} run(s) that finished before step {d.first:,.0f}, where no_norm diverged")
        left = [x for x in left if x]
        return reason + (f"; left out: {'; '.join(left)}" if left else "")


@dataclass(frozen=True, eq=False)  # eq=False: frames inside, compared by identity
class Divergence:
    """Claim 6's runs as they were counted: no_norm's, the study's normalized variants', and of those
    the ones that count (trained through or diverged, and reached no_norm's first divergence)."""

    b: str  # no_norm's label
    runs: pd.DataFrame  # no_norm's runs
    normalized: pd.DataFrame  # the normalized variants' runs
    counted: pd.DataFrame  # the normalized variants' runs that count
    short: pd.DataFrame  # theirs that finished before no_norm's first divergence (never reached it)
    first: float  # the step of no_norm's first divergence (NaN: none)
    event: Counts
    most: float  # the most steps a no_norm run trained through (NaN: none did)
    collapse: int | None = None  # the steps its source says a collapse typically takes

    @classmethod
    def of(cls, b: str, read: pd.DataFrame, collapse: int | None) -> Divergence:
        """The runs `read`, no_norm's (`b`: its label) and the normalized variants', and those that count:
        runs that neither trained through (an evaluation that broke included: `eval not finite`) nor
        diverged are left out, failed, killed or running ones, and normalized runs that finished before
        no_norm's first divergence (they never reached the step)."""
        runs, normalized = read[read.variant == b], read[read.variant != b]
        own = runs[runs.outcome.isin(RESULT_OUTCOMES)]
        theirs = normalized[normalized.outcome.isin(RESULT_OUTCOMES)]
        first = own[own.outcome == DIVERGED].stopped_at_step.min()
        short = theirs[(theirs.outcome != DIVERGED) & (theirs.steps_done < first)] if math.isfinite(first) else theirs.iloc[:0]
        counted = theirs.drop(short.index)
        event = verdicts().Event(int((own.outcome == DIVERGED).sum()), len(own), int((counted.outcome == DIVERGED).sum()), len(counted))
        # Trained through: finished, or ended with a broken evaluation (its steps ran all the same); NaN: none did.
        most = float(own[own.outcome != DIVERGED].steps_done.max())
        return cls(b, runs, normalized, counted, short, first, event, most, collapse)

    @property
    def learning_rates(self) -> tuple[list[float], list[float]]:
        """no_norm's learning rates and the normalized variants'."""
        return sorted(set(self.runs.lr.dropna())), sorted(set(self.normalized.lr.dropna()))

    @property
    def like_for_like(self) -> bool:
        """no_norm at the normalized variants' learning rates (or none recorded)."""
        own, theirs = self.learning_rates
        return not theirs or own == theirs

    def judge(self, study_step: float, alpha: float, ran: int) -> Judgement:
        """Its word at the family's level `alpha` (src.stats.verdicts.judge_event); where the count is too
        few, the seeds per variant that would settle it: more than the `ran` already run, the counts so
        far kept, each further no_norm run diverging and each further normalized run training through
        (MAX_SEEDS + 1: more than MAX_SEEDS)."""
        v, e = verdicts(), self.event
        # Long enough: past the step its source's run went NaN (`study_step`), else the steps it says a
        # collapse takes, else (a claim with neither) any run that trained through.
        horizon = study_step if math.isfinite(study_step) else float(self.collapse or 0)
        j = v.judge_event(e, alpha, self.most >= horizon, normalized=bool(len(self.normalized)), like_for_like=self.like_for_like)
        if j.because != v.Because.TOO_FEW:
            return j
        per = max(round(e.n_others / max(e.n, 1)), 1)  # normalized runs per no_norm run, as run so far

        def settles(seeds: int) -> bool:
            more = seeds - e.n
            return v.Event(e.k + more, seeds, e.k_others, e.n_others + more * per).p < alpha

        return replace(j, settle=v.seeds_to_reach(settles, low=max(ran, e.n)))  # p falls as runs are added


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
