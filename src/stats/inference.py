"""Seed statistics: mean with a t-interval, Welch's comparison, paired tests, TOST and Holm.

Every interval is a two-sided 95% interval from Student's t distribution: with 2-5 seeds per
variant a normal approximation would be far too narrow. Runs of one seed share initial weights and
data order, so two variants are compared by their per-seed differences (paired t, and a paired
bootstrap as a check that needs no normality); Welch's t-test (unequal variances, the
Welch–Satterthwaite degrees of freedom) is left for groups that share too few seeds. Equivalence
is tested with two one-sided tests (TOST) at a margin, and a family of tests is adjusted by Holm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
MIN_SEEDS = 2  # a sample variance needs two values
# The finest step the report's values resolve, relative to their size: float32's. A test loss comes
# out of a float32 tensor (bf16 autocast computes it in float32 too) and a timing's ratio is coarser
# still, so values closer than this are rounding, not seed-to-seed (or round-to-round) variation.
RESOLUTION = float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class Estimate:
    """Mean of one variant's seeds with the half-width of its 95% interval (NaN when n < 2)."""

    n: int
    mean: float
    ci: float

    @property
    def low(self) -> float:
        return self.mean - self.ci

    @property
    def high(self) -> float:
        return self.mean + self.ci


def _finite(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


def rounding(*values: np.ndarray) -> float:
    """The largest gap rounding alone leaves between values of these magnitudes (`RESOLUTION` of the largest)."""
    return RESOLUTION * max((float(np.max(np.abs(v))) for v in values if len(v)), default=0.0)


def alike(x: np.ndarray, *values: np.ndarray) -> bool:
    """No spread: every x within rounding of their mean, rounding taken at the magnitudes of `values`
    (x's own when none; a difference's are the values it was taken between). The one test every
    interval here makes: a spread below the values' resolution reads as none (a zero-wide interval,
    the sign-flip p), never as an interval [x, x] or a t whose p underflows to 0. Past it, every x
    has the sign of the mean, or the mean itself is rounding (`rounding`)."""
    return len(x) > 0 and float(np.max(np.abs(x - np.mean(x)))) <= rounding(*(values or (x,)))


def alike_p(n: int, mean: float, *values: np.ndarray) -> float:
    """The p-value of n observations alike (`alike`): the sign-flip test's n equal signs, or NaN where
    the mean itself is rounding (nothing to test)."""
    return math.nan if abs(mean) <= rounding(*values) else sign_flip_p(n)


def t_quantile(df: float) -> float:
    """The t value that leaves ALPHA/2 in each tail."""
    return float(stats.t.ppf(1 - ALPHA / 2, df))


def mean_ci(values: Sequence[float]) -> Estimate:
    """Mean and 95% t-interval half-width of the finite values (half-width NaN below two values)."""
    x = _finite(values)
    n = len(x)
    if n < MIN_SEEDS:
        return Estimate(n, float(x[0]) if n else math.nan, math.nan)
    sem = float(np.std(x, ddof=1)) / math.sqrt(n)
    return Estimate(n, float(np.mean(x)), t_quantile(n - 1) * sem)


# --- paired comparisons ------------------------------------------------------------------------
# Every variant of one seed starts from the same initial weights and sees the same data order, so
# runs are paired by seed: the per-seed difference removes the seed's share of the noise, which an
# unpaired test (Welch) throws back in.

BOOTSTRAP_RESAMPLES = 9_999
BCA_MIN_N = 4  # BCa's jackknife acceleration is unstable below a handful of pairs; percentile below


@dataclass(frozen=True)
class Interval:
    """A difference (b - a, or a median) with a two-sided 95% interval and the test's p-value."""

    test: str  # paired_t | paired_bootstrap | welch | bootstrap_median
    n: int
    diff: float
    low: float
    high: float
    p_value: float = math.nan
    se: float = math.nan  # standard error of `diff` (t-based tests)
    df: float = math.nan  # degrees of freedom (t-based tests)
    sd: float = math.nan  # spread of the per-seed differences (paired tests)

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def at_level(interval: Interval, alpha: float) -> tuple[float, float]:
    """The two-sided (1 - alpha) t-interval of the same estimate (its `se` and `df`): a 95% interval
    widened for a family of tests. NaN ends where the interval has no spread measured; a zero-width
    interval (every seed moved by the same amount) stays one."""
    if interval.se == 0:
        return interval.diff, interval.diff
    if not (math.isfinite(interval.se) and interval.df > 0):
        return math.nan, math.nan
    half = float(stats.t.ppf(1 - alpha / 2, interval.df)) * interval.se
    return interval.diff - half, interval.diff + half


def sign_flip_p(n: int, one_sided: bool = False) -> float:
    """The smallest p a sign-flip (permutation) test of n observations can give: all n of one sign.
    With no spread it is the honest p (a t statistic is infinite there, its p 0)."""
    return 0.5**n if one_sided else min(1.0, 2 * 0.5**n)


def paired_t(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Mean of the per-pair differences b - a, its 95% t-interval and the paired t-test p-value (`a`
    and `b` aligned: the same seed at the same index; pairs with a non-finite side dropped)."""
    xa, xb = _paired(a, b)
    d = xb - xa
    n = len(d)
    mean = float(np.mean(d)) if n else math.nan
    if n < MIN_SEEDS:
        return Interval("paired_t", n, mean, math.nan, math.nan)
    sd = float(np.std(d, ddof=1))
    if alike(d, xa, xb):
        # Every seed moved by the same amount (to rounding): no interval (zero wide; `sd` keeps what was
        # measured), and t is infinite; the p-value is the sign-flip test's (`alike_p`).
        return Interval("paired_t", n, mean, mean, mean, alike_p(n, mean, xa, xb), 0.0, n - 1, sd)
    se = sd / math.sqrt(n)
    half = t_quantile(n - 1) * se
    p_value = float(2 * stats.t.sf(abs(mean / se), n - 1))
    return Interval("paired_t", n, mean, mean - half, mean + half, p_value, se, n - 1, sd)


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The aligned pairs with both sides finite."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.shape != xb.shape:
        raise ValueError(f"paired samples need equal lengths, got {len(xa)} and {len(xb)}")
    keep = np.isfinite(xa) & np.isfinite(xb)
    return xa[keep], xb[keep]


def paired_bootstrap(a: Sequence[float], b: Sequence[float], seed: int = 0) -> Interval:
    """95% bootstrap interval of mean(b - a), resampling whole pairs (BCa from BCA_MIN_N pairs).
    Seeded, so a report read twice gives the same numbers. No p-value: the interval is the result."""
    xa, xb = _paired(a, b)
    n = len(xa)
    mean = float(np.mean(xb - xa)) if n else math.nan
    if n < MIN_SEEDS:
        return Interval("paired_bootstrap", n, mean, math.nan, math.nan)
    if alike(xb - xa, xa, xb):  # no spread to resample (scipy would warn and return NaN)
        return Interval("paired_bootstrap", n, mean, mean, mean)

    low, high = math.nan, math.nan
    for method in ("BCa", "percentile") if n >= BCA_MIN_N else ("percentile",):
        res = stats.bootstrap(
            (xa, xb), lambda x, y, axis=-1: np.mean(y - x, axis=axis), paired=True, vectorized=True,
            confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP_RESAMPLES, method=method, rng=np.random.default_rng(seed),
        )  # fmt: skip
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            break
    return Interval("paired_bootstrap", n, mean, low, high)


@dataclass(frozen=True)
class Difference(Interval):
    """Welch's mean(b) - mean(a) (`welch`), in the shape of the paired tests (its n the smaller
    group's), with each group's count and mean."""

    n_a: int = 0
    n_b: int = 0
    mean_a: float = math.nan
    mean_b: float = math.nan

    @property
    def testable(self) -> bool:
        return min(self.n_a, self.n_b) >= MIN_SEEDS and math.isfinite(self.p_value)

    @property
    def relative(self) -> float:
        """The difference as a fraction of mean(a) (e.g. 0.12 = b is 12% above a)."""
        return self.diff / self.mean_a if self.mean_a else math.nan


def welch(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Compare b against a unpaired (diff = mean(b) - mean(a)), with the Welch–Satterthwaite df; NaN
    statistics when either has < 2 values."""
    xa, xb = _finite(a), _finite(b)
    na, nb = len(xa), len(xb)
    mean_a = float(np.mean(xa)) if na else math.nan
    mean_b = float(np.mean(xb)) if nb else math.nan
    diff, groups = mean_b - mean_a, {"n_a": na, "n_b": nb, "mean_a": mean_a, "mean_b": mean_b}
    if min(na, nb) < MIN_SEEDS:
        return Difference("welch", min(na, nb), diff, math.nan, math.nan, **groups)
    if alike(xa, xa, xb) and alike(xb, xa, xb):  # each group one value, to rounding: nothing to test
        return Difference("welch", min(na, nb), diff, diff, diff, se=0.0, **groups)
    found = stats.ttest_ind(xb, xa, equal_var=False)  # Welch–Satterthwaite df
    ci, df = found.confidence_interval(CONFIDENCE), float(found.df)
    low, high, p = float(ci.low), float(ci.high), float(found.pvalue)
    return Difference("welch", min(na, nb), diff, low, high, p, (high - diff) / t_quantile(df), df, **groups)


def tost(diff: float, se: float, df: float, margin: float) -> float:
    """Two one-sided tests of equivalence within ±margin: the larger of the two one-sided p-values.
    H0: |true difference| >= margin. A small p says the difference lies inside the margin. With no
    spread (se == 0) the answer is certain: 0 inside the margin, 1 on or outside it."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0, got {margin}")
    if not (math.isfinite(diff) and math.isfinite(se) and se >= 0):
        return math.nan
    if se == 0:
        return 0.0 if abs(diff) < margin else 1.0
    p_lower = float(stats.t.sf((diff + margin) / se, df))  # H0: diff <= -margin
    p_upper = float(stats.t.cdf((diff - margin) / se, df))  # H0: diff >= +margin
    return max(p_lower, p_upper)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment; NaN p-values stay NaN and are not counted in the family."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(len(p), math.nan)
    finite = np.flatnonzero(np.isfinite(p))
    ranked = finite[np.argsort(p[finite], kind="stable")]
    # (m - rank)·p, capped at 1, made monotone: never below an earlier one's.
    out[ranked] = np.maximum.accumulate(np.minimum(1.0, (len(ranked) - np.arange(len(ranked))) * p[ranked]))
    return out.tolist()


def median_interval(values: Sequence[float], seed: int = 0) -> Interval:
    """Median with a 95% percentile-bootstrap interval (benchmark timings: robust to stragglers)."""
    x = _finite(values)
    n = len(x)
    med = float(np.median(x)) if n else math.nan
    if n < MIN_SEEDS or alike(x):
        return Interval("bootstrap_median", n, med, med if n > 1 else math.nan, med if n > 1 else math.nan)
    res = stats.bootstrap(
        (x,), np.median, vectorized=True, confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP_RESAMPLES,
        method="percentile", rng=np.random.default_rng(seed),
    )  # fmt: skip
    return Interval("bootstrap_median", n, med, float(res.confidence_interval.low), float(res.confidence_interval.high))


# --- robust intervals for benchmark rounds ---------------------------------------------------------
TRIM = 0.2  # share of rounds cut from each tail: Wilcox's default, efficient and robust to bursts


def trimmed_mean_interval(values: Sequence[float], trim: float = TRIM) -> Interval:
    """Trimmed mean with the Tukey–McLaughlin 95% t-interval: se = s_w / ((1 - 2g/n)·sqrt(n)), s_w the
    winsorized SD, df = n - 2g - 1 (g = floor(trim·n) cut from each tail).

    The one-sample trimmed-mean interval of Wilcox's `trimci` (Introduction to Robust Estimation and
    Hypothesis Testing), whose (1 - 2·trim) is the (1 - 2g/n) here wherever trim·n is whole; elsewhere
    this divides by the share actually kept. Not Yuen's: Yuen's variance term (n - 1)·s_w² / (h(h - 1))
    (h = n - 2g, as his two-sample test uses it) gives intervals a few percent wider (tests/test_stats.py).

    Why (docs/benchmarks.md, "Why these estimators"): a burst of load that spoils up to `trim` of the
    rounds either side is cut off, and a t-interval plugs into `tost` and src.stats.verdicts (`sd`: the
    spread per round that gives `se` = sd / sqrt(n)) like the paired tests do."""
    x = np.sort(_finite(values))
    n = len(x)
    g = int(math.floor(trim * n))
    kept = x[g : n - g]
    h = len(kept)
    mean = float(np.mean(kept)) if h else math.nan
    if n < MIN_SEEDS or h < MIN_SEEDS:
        return Interval("tukey_mclaughlin", n, mean, math.nan, math.nan)
    winsorized = np.clip(x, x[g], x[n - g - 1])
    sw = float(np.std(winsorized, ddof=1))
    df = h - 1
    if alike(winsorized, x):
        return Interval("tukey_mclaughlin", n, mean, mean, mean, alike_p(n, mean, x), 0.0, df, sw)
    se = sw / ((1 - 2 * g / n) * math.sqrt(n))
    half = t_quantile(df) * se
    p_value = float(2 * stats.t.sf(abs(mean / se), df))
    return Interval("tukey_mclaughlin", n, mean, mean - half, mean + half, p_value, se, df, se * math.sqrt(n))
