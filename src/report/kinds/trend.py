"""A trend: a value per model size moves one way as the model grows — a norm's share of a step falls,
a saving (a's norm time less b's) grows. It claims a side, not a size: its band is that whole side, and
it is read as a difference of the last size's value from the first's (src.report.judge.study_effects
times it in the speed check's share rounds), judged as a difference is. Its `sizes` are known model
sizes, smallest first."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from src.report.kinds.base import At, margin_text, sizes_whose, verdicts
from src.report.kinds.difference import Difference
from src.report.kinds.metrics import SAVING

if TYPE_CHECKING:
    from src.report.judge.study import Finding
    from src.report.read.claims import Part
    from src.stats.verdicts import Judgement, Readings


class Trend(Difference):
    name = "trend"
    paired = False  # a share is of b alone; a saving's `a` is its metric's (src.report.read.claims)
    over_sizes = True
    saving_noun = "the saving"

    def check_a(self, part: Part, metric: str) -> None:
        if part.a is not None and metric != SAVING:
            raise At("a", "a trend is of b alone (its share of a step over model sizes); remove a")

    def check_size(self, metric: str, low: float, high: float) -> None:
        raise At("size", "a trend claims a direction over its sizes, not a size; remove size")

    def band(self, part: Part, metric: str) -> tuple[float, float]:
        return (0.0, math.inf) if metric == SAVING else (-math.inf, 0.0)  # a saving grows; a share falls

    def sign(self, part: Part, metric: str) -> int:
        return 1 if metric == SAVING else -1

    def alike(self, found: Readings) -> Readings:
        # Its band is a whole side: every round on it is consistent, as any interval there is (left
        # untested, a unanimous trend read "partly").
        v = verdicts()
        return replace(found, size=v.Size.CONSISTENT) if found.direction == v.Direction.HOLDS else found

    def claimed(self, part: Part, metric: str) -> str:
        return f"{'falls' if self.sign(part, metric) < 0 else 'grows'} from {part.sizes[0]} to {part.sizes[-1]}"

    def saving_text(self, part: Part, metric: str) -> str:
        return f"the saving {self.claimed(part, metric)} ({sizes_whose(part, 'sizes')})"

    def said(self, f: Finding, j: Judgement, alike: str) -> str:
        v, said = verdicts(), f" ({alike})" if alike else ""
        if j.because not in (v.Because.DIRECTION_AND_SIZE, v.Because.OPPOSITE, v.Because.ZERO_WITHIN_MARGIN):
            return super().said(f, j, alike)
        side, what = ("falls", "the share") if self.sign(f.part, f.metric) < 0 else ("grows", "the saving")
        moved = {v.Because.DIRECTION_AND_SIZE: f"{what} {side}", v.Because.OPPOSITE: "the opposite direction"}.get(j.because)
        # Without spread there is no interval: the rounds' one move and its sign-flip p say it (`said`).
        return f"{moved}{said or ': the interval excludes no change'}" if moved else f"no change of {what} beyond {margin_text(f)}{said}"
