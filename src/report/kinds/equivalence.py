"""An equivalence: b and a do not differ by more than a band around zero (its source's figure, or its
size). Read two-sided, as a difference is, against that band: no side is claimed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from src.report.kinds.base import (
    At,
    ClaimKind,
    check_fraction,
    interval_of,
    margin_text,
    relation_verb,
    verdicts,
)
from src.report.kinds.metrics import SPEED, shown
from src.report.numbers import aside, equivalent_text, settle_text

if TYPE_CHECKING:
    from src.report.judge.study import Finding
    from src.report.read.claims import Part
    from src.stats.verdicts import Estimate, Judgement, Readings


class Equivalence(ClaimKind):
    name = "equivalence"
    draws_margin = True

    def check_size(self, metric: str, low: float, high: float) -> None:
        check_fraction(metric, low, high)
        if not low < 0 < high:
            raise At("size", f"an equivalence's band holds zero inside it, got [{low:g}, {high:g}]")

    def judge(self, part: Part, low: float, high: float, readings: Readings, estimate: Estimate, alpha: float,
              trim: float) -> Judgement:  # fmt: skip
        v = verdicts()  # undecided: the count that puts the interval inside the margin, or wholly beyond it
        return v.judge_interval(v.judge_equivalence(readings), estimate, alpha, trim, beyond=True)

    def claimed(self, part: Part, metric: str) -> str:
        if part.size and part.size[0] == -part.size[1]:
            return f"within ±{shown(metric, part.size[1]).lstrip('+')}"
        return super().claimed(part, metric)

    def said(self, f: Finding, j: Judgement, alike: str) -> str:
        v, r, contrast = verdicts(), j.readings, bool(f.part.minus)
        high = f.part.band(f.metric)[1]
        claimed = f"{f.part.noun}'s " + (f"±{high:.2%}" if f.metric == SPEED else f"±{high:g}")
        margin = margin_text(f)
        remains = shown(f.metric, f.effect.diff, contrast) if alike else interval_of(f, contrast)
        equivalent = equivalent_text(margin.lstrip("±"), remains if r is not None and r.excludes_zero else False)
        differ = f"they differ by {margin} or more (a bound itself is a difference that matters)"
        return {
            v.Because.AS_CLOSE: f"{equivalent}, and as close as {claimed}",
            v.Because.FURTHER_APART: f"{equivalent}, but further apart than {claimed}",
            v.Because.EQUIVALENT_SIZE_UNTESTED: f"{aside(equivalent, alike) if alike else equivalent}: no interval to hold against {claimed}",
            v.Because.DIFFER_BY_MARGIN: aside(differ, alike) if alike else differ,
            v.Because.BEYOND_CLAIMED: f"the whole interval lies beyond {claimed}: no seed count makes them that close",
        }.get(j.because) or (f"the interval straddles the margin ({margin}) and {relation_verb(r) or 'meets'} "
                             f"{claimed}: {settle_text(j.settle, f.effect.per)}")  # fmt: skip
