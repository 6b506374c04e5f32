"""No worse: b is not worse than a by its `margin` or more (worse meaning a higher time or loss), the
claim a researcher means by "my norm is no slower". One-sided: anything better than a, or worse by
less than the margin, holds it; read from the interval's upper end against the margin (the one-sided
test at half the interval's alpha), never by a sequential sweep's two-sided decision."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from src.report.kinds.base import At, ClaimKind, check_fraction, verdicts
from src.report.kinds.metrics import RELATIVE_METRICS, shown
from src.report.numbers import settle_text

if TYPE_CHECKING:
    from src.report.judge.study import Finding
    from src.report.read.claims import Part
    from src.stats.verdicts import Estimate, Judgement, Readings


class NoWorse(ClaimKind):
    name = "no_worse"
    sequential = False

    def check(self, part: Part, metric: str, sizes: dict[str, float]) -> None:
        self.check_a(part, metric)
        if part.size is not None:
            check_fraction(metric, *part.size)
        if part.margin is None:
            raise At("margin", f"a no_worse claim says how much worse b may be: e.g. margin: 0.02 ({'2%' if metric in RELATIVE_METRICS else '0.02 nats'})")
        if part.size is not None:
            raise At("size", "a no_worse claim has a margin, not a size; remove size")
        if not 0 < part.margin < (1 if metric in RELATIVE_METRICS else math.inf):
            unit = "a fraction: 0.02 is 2% (0 < margin < 1)" if metric in RELATIVE_METRICS else "nats, above 0"
            raise At("margin", f"{metric}'s margin is {unit}; got {part.margin:g}")

    def band(self, part: Part, metric: str) -> tuple[float, float]:
        return -math.inf, float(part.margin or 0.0)  # anything better than a, or worse by less than the margin

    def judge(self, part: Part, low: float, high: float, readings: Readings, estimate: Estimate, alpha: float,
              trim: float) -> Judgement:  # fmt: skip
        """From its interval, or with no spread only as far as n equal signs reach the family's level
        (a zero-wide interval is no interval)."""
        v = verdicts()
        if not readings.spread and not readings.alike_p < alpha:
            return v.Judgement(v.ClaimWord.INCONCLUSIVE, v.Because.ALIKE_TOO_FEW, readings,
                               settle=max(v.sign_flip_seeds(alpha), estimate.n + 1))  # fmt: skip
        return replace(v.judge_no_worse(low, high, float(part.margin or 0.0), estimate, alpha, trim), readings=readings)

    def claimed(self, part: Part, metric: str) -> str:
        return f"at most {shown(metric, float(part.margin or 0.0))} worse"

    def said(self, f: Finding, j: Judgement, alike: str) -> str:
        v, part, said = verdicts(), f.part, f" ({alike})" if alike else ""
        bound, upper = shown(f.metric, float(part.margin or 0.0)), shown(f.metric, f.high, bool(part.minus))
        return {
            # With no spread there is no interval: the rounds' one move and its sign-flip p say it (`said`).
            v.Because.NOT_WORSE: f"no worse than {part.a} by {bound}" + (said or f": the interval's upper end {upper} is below it"),
            v.Because.WORSE: f"worse than {part.a} by {bound} or more" + (said or ": the whole interval lies at or beyond it"),
        }.get(j.because) or f"the interval reaches {bound} (its upper end {upper}): {settle_text(j.settle, f.effect.per)}"
