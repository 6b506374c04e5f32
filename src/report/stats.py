"""Seed statistics: mean with a t-interval, and Welch's comparison of two variants.

Every interval is a two-sided 95% interval from Student's t distribution: with 2-5 seeds per
variant a normal approximation would be far too narrow. Two variants are compared with Welch's
t-test (unequal variances), and the interval of their difference uses the Welch–Satterthwaite
degrees of freedom, so the interval and the p-value tell the same story.
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


@dataclass(frozen=True)
class Difference:
    """mean(b) - mean(a), its 95% interval (Welch–Satterthwaite df) and Welch's p-value."""

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float
    low: float
    high: float
    df: float
    p_value: float

    @property
    def testable(self) -> bool:
        return min(self.n_a, self.n_b) >= MIN_SEEDS and math.isfinite(self.p_value)

    @property
    def distinguishable(self) -> bool:
        """True when the difference stands out from seed noise: p < 0.05 and the CI excludes 0."""
        return self.testable and self.p_value < ALPHA and (self.low > 0 or self.high < 0)

    @property
    def relative(self) -> float:
        """The difference as a fraction of mean(a) (e.g. 0.12 = b is 12% above a)."""
        return self.diff / self.mean_a if self.mean_a else math.nan


def _finite(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


def t_quantile(df: float) -> float:
    """The t value that leaves ALPHA/2 in each tail."""
    return float(stats.t.ppf(1 - ALPHA / 2, df))


def mean_ci(values: Sequence[float]) -> Estimate:
    """Mean and 95% t-interval half-width of the finite values (half-width NaN below two values)."""
    x = _finite(values)
    n = len(x)
    if n == 0:
        return Estimate(0, math.nan, math.nan)
    if n < MIN_SEEDS:
        return Estimate(n, float(x[0]), math.nan)
    sem = float(np.std(x, ddof=1)) / math.sqrt(n)
    return Estimate(n, float(np.mean(x)), t_quantile(n - 1) * sem)


def welch(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Compare b against a (diff = mean(b) - mean(a)); NaN statistics when either has < 2 values."""
    xa, xb = _finite(a), _finite(b)
    na, nb = len(xa), len(xb)
    mean_a = float(np.mean(xa)) if na else math.nan
    mean_b = float(np.mean(xb)) if nb else math.nan
    diff = mean_b - mean_a
    if min(na, nb) < MIN_SEEDS:
        return Difference(na, nb, mean_a, mean_b, diff, math.nan, math.nan, math.nan, math.nan)
    va, vb = float(np.var(xa, ddof=1)) / na, float(np.var(xb, ddof=1)) / nb
    se = math.sqrt(va + vb)
    if se == 0:  # identical values in both groups: nothing to test
        return Difference(na, nb, mean_a, mean_b, diff, diff, diff, math.nan, math.nan)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = t_quantile(df) * se
    p_value = float(stats.ttest_ind(xb, xa, equal_var=False).pvalue)
    return Difference(na, nb, mean_a, mean_b, diff, diff - half, diff + half, df, p_value)
