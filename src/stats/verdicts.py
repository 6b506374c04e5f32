"""The one rule from an interval to a word: every verdict the report prints is decided here.

Three kinds of word — a pair's (`PairWord`), a speed verdict's (`SpeedWord`), a claim's (`ClaimWord`)
— each from an interval read three ways (direction, size against a band, equivalence within a
margin), and, undecided, the seeds or rounds that would settle it by the exact t power. The rule as
a table, with each kind's family and level, is docs/statistics.md ("One rule from an interval to a
word"); its claim half docs/reproducing.md. α and the family are always the caller's, never this
module's. Numbers in, readings and words out: no pandas, MLflow or torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import optimize, stats

from src.stats.inference import MIN_SEEDS, Interval, at_level, holm, sign_flip_p, tost
from src.stats.settings import MAX_SEEDS

POWER = 0.80  # the power "would settle it" aims for


class PairWord(StrEnum):
    EQUIVALENT = "equivalent"
    DIFFERENT = "different"
    INCONCLUSIVE = "inconclusive"
    UNTESTED = "untested"


class SpeedWord(StrEnum):
    EQUIVALENT = "equivalent"
    FASTER = "faster"
    SLOWER = "slower"
    UNRESOLVED = "unresolved"


class ClaimWord(StrEnum):
    REPRODUCED = "reproduced"
    PARTLY = "partly reproduced"
    NOT_REPRODUCED = "not reproduced"
    INCONCLUSIVE = "inconclusive"
    NOT_APPLICABLE = "not applicable here"
    NOT_TESTED = "not tested here"  # the sweep ran none of the variants a claim needs


class SequentialWord(StrEnum):
    """A sequential sweep's decision on a comparison at a look (src/stats/sequential.py decides it
    with the alpha it spends over its looks; the report reads it through `decided`)."""

    EQUIVALENT = "equivalent"
    DIFFERENT = "different"
    UNDECIDED = "undecided"
    UNDECIDABLE = "undecidable"  # a later look would decide with too small a chance (futility)
    UNTESTABLE = "untestable"  # fewer than two seeds with a value on both sides

    @property
    def label(self) -> str:
        return {SequentialWord.UNDECIDABLE: "undecidable at this budget", SequentialWord.UNTESTABLE: "not testable"}.get(self, self.value)


class Direction(StrEnum):
    HOLDS = "holds"  # excludes zero on the study's side
    OPPOSITE = "opposite"
    UNDECIDED = "undecided"


class Size(StrEnum):
    CONSISTENT = "consistent"  # meets the band
    SMALLER = "smaller"  # wholly nearer zero than the band
    LARGER = "larger"  # wholly beyond it
    UNTESTED = "untested"  # no spread: a zero-width interval would turn a size into an exact-equality test


class Relation(StrEnum):
    """Where an interval lies against a claimed band: the relation its reason states (the size
    reading joins the first three as consistent, and the last two are smaller or larger)."""

    WITHIN = "within"  # the whole interval inside the band
    HOLDS = "holds"  # the band (or a figure) inside the interval
    OVERLAPS = "overlaps"  # each holds a part of the other
    APART = "apart"  # no value in common
    NONE = "none"  # no interval (no spread) or no band


def relation(low: float, high: float, band: tuple[float, float]) -> Relation:
    """The relation of [low, high] to the band (edges count as inside, as `read`'s size does)."""
    b_low, b_high = band
    if math.isnan(b_low) or math.isnan(b_high):
        return Relation.NONE
    if b_low <= low and high <= b_high:
        return Relation.WITHIN
    if low <= b_low and b_high <= high:
        return Relation.HOLDS
    return Relation.OVERLAPS if low <= b_high and high >= b_low else Relation.APART


class Equivalence(StrEnum):
    INSIDE = "inside"  # the whole interval within ±margin
    OUTSIDE = "outside"
    UNDECIDED = "undecided"  # straddles the margin


# --- how many more observations would settle it (exact t power) ------------------------------------


def _df(n: int, trim: float) -> int:
    """Degrees of freedom of a mean of n (trim = 0) or of a 20% trimmed mean of n rounds (Tukey–McLaughlin's interval)."""
    return n - 2 * math.floor(trim * n) - 1


def power_difference(n: int, effect: float, sd: float, alpha: float, trim: float = 0.0) -> float:
    """Power of the two-sided t-test at `alpha` to find a true `effect` with n observations of spread `sd`."""
    df = _df(n, trim)
    if df < 1:
        return 0.0
    nc, c = effect / (sd / math.sqrt(n)), float(stats.t.ppf(1 - alpha / 2, df))
    return _above(c, df, nc) + _above(c, df, -nc)  # beyond +c, and below -c (the mirror image)


def _above(c: float, df: int, nc: float) -> float:
    """P(T > c) for T noncentral t; scipy returns NaN for a vanishing tail far from nc (scipy 1.17)."""
    p = float(stats.nct.sf(c, df, nc))
    return p if math.isfinite(p) else float(nc > c)


def power_equivalence(n: int, effect: float, sd: float, margin: float, alpha: float, trim: float = 0.0) -> float:
    """Power of two one-sided tests, each at `alpha`, to show a true `effect` within ±margin (exact:
    the mean is normal given the sample SD, integrated over the SD's chi distribution)."""
    df = _df(n, trim)
    if df < 1:
        return 0.0
    se, c = sd / math.sqrt(n), float(stats.t.ppf(1 - alpha, df))
    # Both tests reject when |mean| < margin - c·ŝ, ŝ = se·sqrt(V/df), V ~ χ²(df): possible while ŝ < margin / c.
    u_max = float(stats.chi2.cdf(df * (margin / (c * se)) ** 2, df))
    if u_max <= 0:
        return 0.0
    # Over u = P(V ≤ v) the integrand is smooth and bounded: Gauss–Legendre nodes, one vectorised pass.
    u = u_max * (_NODES + 1) / 2
    half = margin - c * se * np.sqrt(stats.chi2.ppf(u, df) / df)
    inside = stats.norm.cdf((half - effect) / se) - stats.norm.cdf((-half - effect) / se)
    return float(u_max / 2 * np.dot(_WEIGHTS, inside))


_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(96)


def needed(sd: float, diff: float, alpha: float, margin: float | None = None, trim: float = 0.0) -> int | None:
    """Observations (seeds, or speed-check rounds with `trim`) that give 80% power, the true effect
    taken to be `diff`: for a difference (margin None) the two-sided test at `alpha`; for
    equivalence within ±margin both one-sided tests at `alpha`. None when nothing can settle it (no
    spread measured; an equivalence with no room); MAX_SEEDS + 1 beyond MAX_SEEDS."""
    if not (math.isfinite(sd) and math.isfinite(diff)) or sd <= 0:
        return None
    if margin is None:
        return seeds_to_reach(lambda n: power_difference(n, abs(diff), sd, alpha, trim) >= POWER) if diff else None
    if abs(diff) >= margin:
        return None
    return seeds_to_reach(lambda n: power_equivalence(n, abs(diff), sd, margin, alpha, trim) >= POWER)


def least_detectable(n: int, sd: float, alpha: float) -> float:
    """The least |Δ| that n observations of spread `sd` show as a difference with the power `needed`
    aims for (the two-sided t-test at `alpha`): `needed` read the other way, by the same power."""
    if not (math.isfinite(sd) and sd > 0) or n < 2:
        return math.nan
    return sd * _least_detectable_per_sd(n, alpha)


@lru_cache(maxsize=4096)
def _least_detectable_per_sd(n: int, alpha: float) -> float:
    """`least_detectable` in units of the spread: the power reads Δ only through its noncentrality
    Δ/(sd/√n), so one root per (n, α) serves every spread (a sequential sweep asks it at every look of
    every pair, each a root search of noncentral-t tails)."""
    se = 1 / math.sqrt(n)
    high = se * 2  # power grows with |Δ|: widen until it reaches POWER, then bisect
    while power_difference(n, high, 1.0, alpha) < POWER:
        high *= 2
    return float(optimize.brentq(lambda d: power_difference(n, d, 1.0, alpha) - POWER, 0.0, high, xtol=se * 1e-6))


def first_seeds(reaches: Callable[[int], bool], most: int = MAX_SEEDS, low: int = MIN_SEEDS - 1) -> int | None:
    """The fewest seeds above `low` at which `reaches` holds, for a property that holds for every count
    above one that does (power grows with n): bisected (None: not by `most`)."""
    if low >= most or not reaches(most):
        return None
    high = most
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return high


def seeds_to_reach(reaches: Callable[[int], bool], low: int = MIN_SEEDS - 1) -> int:
    """`first_seeds`, or MAX_SEEDS + 1 where not even MAX_SEEDS reach it (what "would settle it" prints)."""
    found = first_seeds(reaches, low=low)
    return MAX_SEEDS + 1 if found is None else found


def to_settle(sd: float, diff: float, n: int, margin: float | None, difference_alpha: float, equivalence_alpha: float,
              trim: float = 0.0, beyond: bool = False) -> int | None:  # fmt: skip
    """The one count of what would settle an undecided reading, the true effect taken to be `diff`
    (n observations of spread `sd` so far): inside ±margin, the count that shows equivalence at
    `equivalence_alpha`; else the count that shows a difference at `difference_alpha` — from zero, or
    with `beyond`, from the margin (a claim whose interval must clear it). Never fewer than n + 1:
    the count assumes the observed spread, and n already failed."""
    if margin is not None and abs(diff) < margin:
        count = needed(sd, diff, equivalence_alpha, margin, trim)
    elif margin is not None and beyond:
        count = needed(sd, abs(diff) - margin, difference_alpha, trim=trim)
    else:
        count = needed(sd, diff, difference_alpha, trim=trim)
    return None if count is None else max(count, n + 1)


class Family(NamedTuple):
    """A family's decisions (None: an estimate with nothing to test), its p-values Holm-adjusted (NaN
    stays NaN: an untested estimate, or one with no spread and nothing to test) and its size: the
    tests Holm adjusted over, those with a p-value. The one count a report prints."""

    decisions: list[Decision | None]
    adjusted: list[float]
    size: int


def decide_family(estimates: Sequence[Estimate], alpha: float, trim: float = 0.0) -> Family:
    """The decisions of a family of estimates, each at its own margin: a difference shown by its
    p-value Holm-adjusted over the family (the p-values that exist), an equivalence by TOST at alpha
    (per estimate only one of the two errors is possible)."""
    adjusted = holm([e.p_value for e in estimates])
    size = sum(math.isfinite(p) for p in adjusted)
    found = [decide_pair(e, p, alpha, size, trim) for e, p in zip(estimates, adjusted, strict=True)]
    return Family(found, adjusted, size)


@dataclass(frozen=True)
class Estimate(Interval):
    """What a decision reads: an interval (the estimate, its standard error and degrees of freedom, the
    spread of one observation and their count, its two-sided p-value) at its equivalence margin."""

    margin: float = math.nan

    @classmethod
    def of(cls, i: Interval, margin: float, sd: float | None = None) -> Estimate:
        """An interval's estimate at `margin` (`sd`: the spread of one observation where the interval has none)."""
        found = {f.name: getattr(i, f.name) for f in fields(Interval)}
        return cls(**{**found, "sd": i.sd if sd is None else sd}, margin=margin)


def look_word(diff: float, se: float, df: float, p: float, margin: float, level: float) -> tuple[float, SequentialWord]:
    """A sequential look's TOST p and decision at the level it spends: equivalent by TOST within
    ±margin, else different by the paired t-test's `p` (with no spread, the sign-flip test's, as for a
    pair), else undecided (the sweeper adds undecidable and untestable). No spread inside the margin
    reads as TOST at se 0 (equivalent), so a tie to the last bit and rounding noise read alike: why,
    in docs/sequential.md (step 4, "No spread")."""
    tost_p = tost(diff, se, df, margin)
    word = SequentialWord.EQUIVALENT if tost_p < level else SequentialWord.DIFFERENT if p < level else SequentialWord.UNDECIDED
    return tost_p, word


def shown_without_spread(n: int, level: float) -> bool:
    """Whether n differences with no spread, all of one sign, show a difference at `level`: the
    sign-flip test's 2/2ⁿ (src.stats.inference.alike_p), as `look_word` reads them."""
    return sign_flip_p(n) < level


# --- pairs and speed: two tests at the caller's levels ----------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One pair's readings: equivalence (TOST at α) and direction (the family-adjusted p at α), and
    the interval its word was read from (`low`, `high` at `level`): TOST's 1 − 2α interval for an
    equivalence, else the 1 − α interval; zero wide when every observation moved alike (`spread` 0)."""

    tost_p: float
    inside: bool  # equivalent within ±margin
    sign: int  # +1 / -1 when the difference is shown at the family's level, else 0
    settle: int | None  # undecided: observations that would settle it
    low: float = math.nan
    high: float = math.nan
    level: float = math.nan  # the confidence of [low, high]
    spread: bool = True  # False: every observation moved by exactly the same amount (no interval)

    @property
    def remains(self) -> bool:
        """Equivalent, and a difference shown too: a small, real effect."""
        return self.inside and self.sign != 0


def sign_flip_seeds(alpha: float, one_sided: bool = False) -> int:
    """Observations at which n of one sign reach `alpha` (a sign-flip test's floor; MAX_SEEDS at the most)."""
    return first_seeds(lambda n: sign_flip_p(n, one_sided) < alpha, low=0) or MAX_SEEDS


def decide_pair(e: Estimate, p_holm: float, alpha: float, family: int, trim: float = 0.0) -> Decision | None:
    """A pair's decision from its estimate (`diff`, `se`, `df`; `sd` per observation, n of them),
    its equivalence margin, and its p-value adjusted over its family (with no spread, the sign-flip
    test's: src.stats.inference). None when there is no spread measured to test with (one seed).
    Undecided, the count that would settle it, at the level its word is read at (docs/statistics.md,
    "What would settle it"); with no spread, the count at which a sign-flip test reaches it."""
    diff, se, df, sd, n, margin = e.diff, e.se, e.df, e.sd, e.n, e.margin
    if not (math.isfinite(se) and se >= 0) or (se > 0 and not df > 0):
        return None
    spread = se > 0
    tost_p = tost(diff, se, df, margin) if spread else (sign_flip_p(n, one_sided=True) if abs(diff) < margin else 1.0)
    inside = math.isfinite(tost_p) and tost_p < alpha
    sign = int(math.copysign(1, diff)) if math.isfinite(p_holm) and p_holm < alpha else 0
    if inside or sign:
        settle = None
    elif spread:
        settle = to_settle(sd, diff, n, margin, family_alpha(alpha, family), alpha, trim)
    else:
        at_best = sign_flip_seeds(alpha, one_sided=True) if abs(diff) < margin else sign_flip_seeds(family_alpha(alpha, family))
        settle = max(at_best, n + 1)
    level = 1 - 2 * alpha if inside else 1 - alpha
    return Decision(tost_p, inside, sign, settle, *at_level(e, 1 - level), level, spread)


def speed_margin(margin: float) -> float:
    """A relative speed margin m in log step-time ratio: ±log(1 + m), a step-time ratio within
    1/(1 + m) … 1 + m (the same factor either way: −1.96% … +2% for m = 2%)."""
    return math.log1p(margin)


def speed_bounds(margin: float) -> tuple[float, float]:
    """The same equivalence region as relative step-time changes: (−m/(1 + m), +m)."""
    room = speed_margin(margin)
    return math.expm1(-room), math.expm1(room)


def pair_word(d: Decision | None) -> PairWord:
    if d is None:
        return PairWord.UNTESTED
    return PairWord.EQUIVALENT if d.inside else PairWord.DIFFERENT if d.sign else PairWord.INCONCLUSIVE


def speed_word(d: Decision) -> SpeedWord:
    """Of a step-time change b vs a: more time is slower."""
    if d.inside:
        return SpeedWord.EQUIVALENT
    return SpeedWord.SLOWER if d.sign > 0 else SpeedWord.FASTER if d.sign < 0 else SpeedWord.UNRESOLVED


# --- claims: three readings of one interval, then a word ----------------------------------------------


@dataclass(frozen=True)
class Readings:
    direction: Direction
    size: Size
    equivalence: Equivalence
    excludes_zero: bool = False  # whatever the claim's sign: an equivalent effect that is still real
    holds_zero: bool = True  # the interval printed beside the word holds zero (a sequential decision may differ)
    spread: bool = True  # False: every observation moved by exactly the same amount (no interval)
    alike_p: float = math.nan  # with no spread, the sign-flip p of n equal signs that read it instead
    relation: Relation = Relation.NONE  # the interval against the claimed band: what a reason states


def read(low: float, high: float, sign: int, band: tuple[float, float], margin: float,
         bounds: tuple[float, float] | None = None) -> Readings:  # fmt: skip
    """The readings of [low, high] for a claim whose effect has the study's `sign` (-1 or +1; 0 for
    an equivalence), claimed `band` (signed, low <= high) and equivalence `margin` (the region
    (-margin, +margin), or `bounds` where it is not symmetric: a speed margin, `speed_bounds`). At an
    edge a value reads one way: docs/statistics.md, "One interval per word, and the edges"."""
    if not (low <= high) or math.isnan(low) or math.isnan(high):
        raise ValueError(f"an interval needs low <= high, got [{low}, {high}]")
    side = 1 if low > 0 else -1 if high < 0 else 0
    direction = Direction.UNDECIDED if sign == 0 or side == 0 else Direction.HOLDS if side == sign else Direction.OPPOSITE
    b_low, b_high = band
    found = relation(low, high, band)  # the size reading and the reasons' relation: one comparison
    if found in (Relation.WITHIN, Relation.HOLDS, Relation.OVERLAPS):
        size = Size.CONSISTENT
    else:  # apart from the band: nearer zero than it, else beyond it (an equivalence's band, sign 0, holds zero: beyond)
        nearer = sign != 0 and (low > b_high if sign < 0 else high < b_low)
        size = Size.SMALLER if nearer else Size.LARGER
    lower, upper = bounds or (-margin, margin)
    equivalence = (Equivalence.INSIDE if lower < low and high < upper
                   else Equivalence.OUTSIDE if low >= upper or high <= lower else Equivalence.UNDECIDED)  # fmt: skip
    return Readings(direction, size, equivalence, side != 0, side == 0, relation=found)


def read_alike(diff: float, n: int, sign: int, margin: float, alpha: float,
               bounds: tuple[float, float] | None = None) -> Readings:  # fmt: skip
    """The readings when all n observations moved by exactly `diff` (no spread, so no interval): a
    direction or an equivalence only as far as n equal signs show it (the sign-flip test's floor,
    two-sided at `alpha` as the claim's interval is), and no size test (`Size.UNTESTED`)."""
    p = sign_flip_p(n)
    if not p < alpha:  # n equal signs short of alpha show nothing
        return Readings(Direction.UNDECIDED, Size.UNTESTED, Equivalence.UNDECIDED, spread=False, alike_p=p)
    shown = read(diff, diff, sign, (math.nan, math.nan), margin, bounds)  # as the interval [diff, diff]
    return replace(shown, size=Size.UNTESTED, spread=False, alike_p=p)


def decided(readings: Readings, decision: SequentialWord | str, same_side: bool) -> Readings:
    """A sequential sweep's readings: direction and equivalence from its own decision, error-controlled
    over its looks; the size from the interval."""
    if decision == SequentialWord.DIFFERENT:
        direction = Direction.HOLDS if same_side else Direction.OPPOSITE
        return replace(readings, direction=direction, equivalence=Equivalence.UNDECIDED, excludes_zero=True)
    inside = Equivalence.INSIDE if decision == SequentialWord.EQUIVALENT else Equivalence.UNDECIDED
    return replace(readings, direction=Direction.UNDECIDED, equivalence=inside, excludes_zero=False)


class Because(StrEnum):
    """Which reading (or gate) decided a claim part's word: the reason as data, which the report's
    sentences are written from (never re-derived)."""

    # gates, before any interval is read
    OUTSIDE_DOMAIN = "outside the domain"
    NO_RUNS = "no finished runs"
    NO_INTERVAL = "no interval"
    NO_NORMALIZED = "no normalized variant beside it"
    NOT_LIKE_FOR_LIKE = "not like for like"
    # a difference
    DIRECTION_AND_SIZE = "the study's direction and size"
    DIRECTION_SMALLER = "the study's direction, smaller"
    DIRECTION_LARGER = "the study's direction, larger"
    DIRECTION_SIZE_UNTESTED = "the study's direction, no spread to test its size"
    OPPOSITE = "the opposite direction"
    ZERO_WITHIN_MARGIN = "equivalent to zero"
    DIRECTION_UNDECIDED = "direction undecided"
    # an equivalence
    AS_CLOSE = "equivalent, as close"
    FURTHER_APART = "equivalent, further apart"
    EQUIVALENT_SIZE_UNTESTED = "equivalent, no spread to test how close"
    DIFFER_BY_MARGIN = "differ by the margin or more"
    BEYOND_CLAIMED = "beyond the claimed size"
    STRADDLES = "straddles the margin"
    ALIKE_TOO_FEW = "all alike, too few to show it"  # no spread: n equal signs short of the family's level
    # no worse (non-inferiority)
    NOT_WORSE = "no worse than the margin"
    WORSE = "worse by the margin or more"
    MAY_BE_WORSE = "the interval reaches the margin"
    # an event
    NONE_COUNTS = "no run counts"
    TRAINED_WHERE_OTHERS_DIVERGED = "trained where the others diverged"
    TRAINED_PAST_STUDY = "trained past the study's NaN"
    TRAINED_TOO_SHORT = "trained too short to tell"
    BEYOND_CHANCE = "diverged beyond chance"
    AS_OFTEN = "the others diverged as often"
    TOO_FEW = "too few runs to tell"


@dataclass(frozen=True)
class Judgement:
    """A claim part's word with its reason as data: the reading or gate that decided it, the
    readings, outside the domain what it reads at the sweep's own setting (`here`), and undecided,
    the observations that would settle it (`settle`, None: no count; `judge_interval`)."""

    word: ClaimWord
    because: Because
    readings: Readings | None = None
    here: Judgement | None = None
    settle: int | None = None


def judge_difference(r: Readings) -> Judgement:
    """A difference's word from its readings (the table in docs/statistics.md), and which decided it."""
    if r.direction == Direction.HOLDS:
        because = {Size.CONSISTENT: Because.DIRECTION_AND_SIZE, Size.UNTESTED: Because.DIRECTION_SIZE_UNTESTED,
                   Size.SMALLER: Because.DIRECTION_SMALLER, Size.LARGER: Because.DIRECTION_LARGER}[r.size]  # fmt: skip
        return Judgement(ClaimWord.REPRODUCED if r.size == Size.CONSISTENT else ClaimWord.PARTLY, because, r)
    if r.direction == Direction.OPPOSITE:
        return Judgement(ClaimWord.NOT_REPRODUCED, Because.OPPOSITE, r)
    if r.equivalence == Equivalence.INSIDE:
        return Judgement(ClaimWord.NOT_REPRODUCED, Because.ZERO_WITHIN_MARGIN, r)
    return Judgement(ClaimWord.INCONCLUSIVE, Because.DIRECTION_UNDECIDED if r.spread else Because.ALIKE_TOO_FEW, r)


def judge_equivalence(r: Readings) -> Judgement:
    """An equivalence's word from its readings (the table in docs/statistics.md), and which decided it."""
    if r.equivalence == Equivalence.INSIDE:
        if r.size == Size.CONSISTENT:
            return Judgement(ClaimWord.REPRODUCED, Because.AS_CLOSE, r)
        return Judgement(ClaimWord.PARTLY, Because.FURTHER_APART if r.spread else Because.EQUIVALENT_SIZE_UNTESTED, r)
    if r.equivalence == Equivalence.OUTSIDE:
        return Judgement(ClaimWord.NOT_REPRODUCED, Because.DIFFER_BY_MARGIN, r)
    # Wholly beyond the claimed size, and not shown equivalent: no seed count makes it the claim.
    if r.size == Size.LARGER:
        return Judgement(ClaimWord.NOT_REPRODUCED, Because.BEYOND_CLAIMED, r)
    return Judgement(ClaimWord.INCONCLUSIVE, Because.STRADDLES if r.spread else Because.ALIKE_TOO_FEW, r)


def judge_interval(j: Judgement, e: Estimate, alpha: float, trim: float = 0.0, beyond: bool = False) -> Judgement:
    """A part's judgement (`judge_difference`, `judge_equivalence`) and, undecided, what would settle
    it (`to_settle`, the true effect taken to be the estimate `e`, in the units of its `margin`, its
    interval at 1 − alpha; an equivalence's from the margin: `beyond`); with no spread, the count at
    which n equal signs reach alpha."""
    if j.word != ClaimWord.INCONCLUSIVE or j.readings is None:
        return j
    if not j.readings.spread:
        return replace(j, settle=max(sign_flip_seeds(alpha), e.n + 1))
    return replace(j, settle=to_settle(e.sd, e.diff, e.n, e.margin, alpha, alpha / 2, trim, beyond=beyond))


def judge_no_worse(low: float, high: float, margin: float, e: Estimate, alpha: float, trim: float = 0.0) -> Judgement:
    """A non-inferiority part (b no worse than a by `margin`, worse meaning higher) from the interval
    [low, high] at the family's level (docs/statistics.md's *no worse* row); undecided, the count whose
    interval would clear the margin, the true effect taken to be `e`. The margin's edge counts as worse."""
    if high < margin:
        return Judgement(ClaimWord.REPRODUCED, Because.NOT_WORSE)
    if low >= margin:
        return Judgement(ClaimWord.NOT_REPRODUCED, Because.WORSE)
    settle = to_settle(e.sd, margin - e.diff, e.n, None, alpha, alpha, trim)  # a difference from the margin
    return Judgement(ClaimWord.INCONCLUSIVE, Because.MAY_BE_WORSE, settle=settle)


def gate(inside: Judgement, outside_domain: bool, say_here: bool = True) -> Judgement:
    """The domain gate: outside the claim's domain a part is *not applicable here*, and keeps what it
    reads at the sweep's own setting (`say_here`: when there is a reading to say)."""
    if not outside_domain:
        return inside
    return Judgement(ClaimWord.NOT_APPLICABLE, Because.OUTSIDE_DOMAIN, inside.readings, inside if say_here else None)


def no_evidence(has_runs: bool) -> Judgement:
    """A part with nothing to read: no finished runs of its variants, or one run each (no interval)."""
    return Judgement(ClaimWord.INCONCLUSIVE, Because.NO_INTERVAL if has_runs else Because.NO_RUNS)


def claim_word(words: Sequence[str], unswept: int = 0) -> ClaimWord:
    """A claim's word from its parts' words and the count of its parts whose norms were not swept
    (inconclusive, unless every swept part is outside the domain: an unswept one would be too)."""
    found = set(words)
    if not found - {ClaimWord.NOT_APPLICABLE}:
        return ClaimWord.NOT_APPLICABLE if found else ClaimWord.NOT_TESTED
    found |= {ClaimWord.INCONCLUSIVE} if unswept else set()
    if found == {ClaimWord.REPRODUCED}:
        return ClaimWord.REPRODUCED
    if found & {ClaimWord.REPRODUCED, ClaimWord.PARTLY}:
        return ClaimWord.PARTLY
    return ClaimWord.NOT_REPRODUCED if ClaimWord.NOT_REPRODUCED in found else ClaimWord.INCONCLUSIVE


def family_alpha(alpha: float, family: int) -> float:
    """The level each test of a family of `family` is taken at (Bonferroni)."""
    return alpha / max(family, 1)


# --- an event: one variant diverges where the others train -------------------------------------------


@dataclass(frozen=True)
class Event:
    """Diverged runs of the variant without a norm (`k` of `n`) against the normalized variants'
    (`k_others` of `n_others`): runs that either trained through or diverged, nothing else."""

    k: int
    n: int
    k_others: int
    n_others: int

    @property
    def p(self) -> float:
        """Fisher's exact one-sided p: no_norm diverges more often than the others only by chance."""
        table = [[self.k, self.n - self.k], [self.k_others, self.n_others - self.k_others]]
        return float(stats.fisher_exact(table, alternative="greater").pvalue)


def judge_event(e: Event, alpha: float, long_enough: bool, normalized: bool = True, like_for_like: bool = True) -> Judgement:
    """The divergence claim's word and what decided it: the gates first (a normalized variant trained
    beside no_norm, at its learning rate), then the counts of runs that trained or diverged, Fisher at
    the family's `alpha` (`long_enough`: no_norm trained as long as the study's run took to go NaN).
    The rule, word by word: docs/reproducing.md, "Claim 6"."""
    if not normalized:
        return Judgement(ClaimWord.NOT_APPLICABLE, Because.NO_NORMALIZED)
    if not like_for_like:
        return Judgement(ClaimWord.NOT_APPLICABLE, Because.NOT_LIKE_FOR_LIKE)
    if not (e.n and e.n_others):
        return Judgement(ClaimWord.INCONCLUSIVE, Because.NONE_COUNTS)
    if not e.k:
        if e.k_others:
            return Judgement(ClaimWord.NOT_REPRODUCED, Because.TRAINED_WHERE_OTHERS_DIVERGED)
        return Judgement(ClaimWord.NOT_REPRODUCED, Because.TRAINED_PAST_STUDY) if long_enough else Judgement(ClaimWord.NOT_APPLICABLE, Because.TRAINED_TOO_SHORT)
    if e.p < alpha:
        return Judgement(ClaimWord.REPRODUCED, Because.BEYOND_CHANCE)
    if e.k_others / e.n_others >= e.k / e.n:
        return Judgement(ClaimWord.NOT_APPLICABLE, Because.AS_OFTEN)
    return Judgement(ClaimWord.INCONCLUSIVE, Because.TOO_FEW)
