"""Seed statistics against hand-worked formulas and textbook numbers: Welch, paired, TOST, Holm."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from src.stats.inference import (
    holm,
    mean_ci,
    median_interval,
    paired_bootstrap,
    paired_t,
    tost,
    trimmed_mean_interval,
    welch,
)
from src.stats.verdicts import least_detectable, needed, power_difference, power_equivalence

# Welch's t-test, example 1 of the Wikipedia article (t = -2.46, df = 24.99, p = 0.021).
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def sample_var(x: list[float]) -> float:
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def test_mean_ci_matches_the_t_table() -> None:
    est = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    # s = sqrt(2.5); t(0.975, df=4) = 2.7764 from any t table.
    assert est.n == 5
    assert est.mean == pytest.approx(3.0)
    assert est.ci == pytest.approx(2.7764451 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    assert (est.low, est.high) == pytest.approx((3.0 - est.ci, 3.0 + est.ci))


def test_mean_ci_needs_two_values_and_skips_non_finite() -> None:
    one = mean_ci([3.5])
    assert (one.n, one.mean) == (1, 3.5) and math.isnan(one.ci)
    none = mean_ci([])
    assert none.n == 0 and math.isnan(none.mean)
    assert mean_ci([1.0, float("nan"), 3.0, float("inf")]) == mean_ci([1.0, 3.0])


def test_welch_matches_textbook_example() -> None:
    d = welch(A1, A2)  # diff = mean(A2) - mean(A1)
    se = math.sqrt(sample_var(A1) / 15 + sample_var(A2) / 15)
    assert d.diff / se == pytest.approx(2.46, abs=0.005)
    assert d.df == pytest.approx(24.99, abs=0.01)
    assert d.p_value == pytest.approx(0.021, abs=0.0005)
    assert d.diff == pytest.approx(sum(A2) / 15 - sum(A1) / 15)
    # t(0.975, 24.99) = 2.0595: the interval is diff ± t·se with the Welch–Satterthwaite df.
    assert (d.low, d.high) == pytest.approx((d.diff - 2.0595 * se, d.diff + 2.0595 * se), abs=1e-3)
    assert d.testable and d.p_value < 0.05 and d.low > 0


def test_welch_unequal_sizes_by_hand() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0]
    va, vb = sample_var(a) / 4, sample_var(b) / 5  # 5/12 and 2
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 4)
    d = welch(a, b)
    assert d.diff == pytest.approx(3.5)
    assert d.df == pytest.approx(df)
    assert d.relative == pytest.approx(3.5 / 2.5)


def test_overlapping_seeds_are_not_told_apart() -> None:
    d = welch([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert d.testable
    assert d.low < 0 < d.high and d.p_value > 0.05


def test_welch_with_one_seed_is_not_testable() -> None:
    d = welch([1.0], [2.0, 3.0])
    assert d.diff == pytest.approx(1.5)
    assert not d.testable
    assert math.isnan(d.p_value) and math.isnan(d.low)


# --- paired tests, TOST, Holm, seeds needed ----------------------------------------------------


def test_paired_t_by_hand() -> None:
    a, b = [6.10, 6.20, 6.00], [6.13, 6.21, 6.05]  # differences 0.03, 0.01, 0.05: mean 0.03, sd 0.02
    r = paired_t(a, b)
    se = 0.02 / math.sqrt(3)
    assert (r.test, r.n, r.df) == ("paired_t", 3, 2)
    assert r.diff == pytest.approx(0.03) and r.sd == pytest.approx(0.02) and r.se == pytest.approx(se)
    # t(0.975, 2) = 4.3027 from any t table; t = 0.03 / se = 2.598 -> two-sided p = 0.1217.
    assert (r.low, r.high) == pytest.approx((0.03 - 4.3027 * se, 0.03 + 4.3027 * se), abs=1e-4)
    assert r.p_value == pytest.approx(0.1217, abs=5e-4)
    # The seed's share of the noise is gone: Welch on the same numbers sees nothing.
    assert welch(a, b).high - welch(a, b).low > 4 * (r.high - r.low)


def test_paired_identical_values_and_constant_shift() -> None:
    same = paired_t([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert (same.diff, same.low, same.high, same.se) == (0.0, 0.0, 0.0, 0.0) and math.isnan(same.p_value)
    assert tost(same.diff, same.se, same.df, margin=0.01) == 0.0  # certainly inside any margin
    shifted = paired_t([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    # Every seed moved by exactly 0.5: no interval, and the p-value is the sign-flip test's floor
    # (3 equal signs: 2/8), never the 0 of an infinite t.
    assert (shifted.diff, shifted.low, shifted.high, shifted.p_value) == (0.5, 0.5, 0.5, 0.25)
    boot = paired_bootstrap([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert (boot.low, boot.high) == (0.5, 0.5)


def test_paired_drops_incomplete_pairs_and_needs_two() -> None:
    r = paired_t([1.0, 2.0, math.nan], [1.1, 2.3, 9.0])  # the third seed diverged on one side
    assert r.n == 2 and r.diff == pytest.approx(0.2)
    one = paired_t([1.0], [1.2])
    assert one.n == 1 and math.isnan(one.low) and math.isnan(one.p_value)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_t([1.0, 2.0], [1.0])


def test_paired_bootstrap_brackets_the_mean_and_is_reproducible() -> None:
    a = [6.1, 6.2, 6.0, 6.3, 6.15, 6.05]
    b = [x + d for x, d in zip(a, [0.03, 0.01, 0.05, 0.02, 0.04, 0.03], strict=True)]
    r = paired_bootstrap(a, b)
    assert r.test == "paired_bootstrap" and r.n == 6
    assert 0.01 <= r.low < r.diff < r.high <= 0.05  # inside the range of the differences
    assert paired_bootstrap(a, b) == r  # seeded


def test_tost_edges() -> None:
    # Exactly on the margin, or outside it, is never "equivalent"; far inside with little noise is.
    assert tost(0.0, 0.001, 10, margin=0.01) < 1e-6
    assert tost(0.01, 0.0, 10, margin=0.01) == 1.0
    assert tost(0.02, 0.001, 10, margin=0.01) > 0.99
    assert tost(0.0, 0.1, 2, margin=0.01) > 0.45  # huge noise: nothing can be claimed
    # By hand: diff 0.004, se 0.002, df 4 -> upper test t = -3, p = t.cdf(-3, 4) = 0.0200.
    assert tost(0.004, 0.002, 4, margin=0.01) == pytest.approx(0.0200, abs=5e-4)
    assert math.isnan(tost(math.nan, 0.1, 2, margin=0.01))
    with pytest.raises(ValueError, match="> 0"):
        tost(0.0, 0.1, 2, margin=0.0)


def test_holm_by_hand_and_at_its_edges() -> None:
    # Sorted 0.01, 0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06.
    assert holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert holm([0.5]) == [0.5]  # a family of one is not adjusted
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    out = holm([math.nan, 0.02, 0.01])
    assert math.isnan(out[0]) and out[1:] == pytest.approx([0.02, 0.02])  # NaN is not in the family
    assert holm([]) == []


def test_seeds_needed_by_exact_t_power() -> None:
    """The seeds that settle a comparison come from the t distribution's own power, not a normal
    approximation with t quantiles."""
    # A paired difference of -0.012 (SD 0.0136) at α = 0.005: the quantile sum said 21; the power of
    # the noncentral t at 21 is 0.798, at 22 0.826 (scipy.stats.nct, by hand below).
    t, nct = stats.t, stats.nct

    def power(n: int) -> float:
        c, nc = t.ppf(1 - 0.005 / 2, n - 1), 0.012 / 0.0136 * math.sqrt(n)
        return nct.sf(c, n - 1, nc) + nct.cdf(-c, n - 1, nc)

    assert power(21) == pytest.approx(0.7977, abs=1e-4) and power(22) == pytest.approx(0.8259, abs=1e-4)
    assert needed(sd=0.0136, diff=-0.012, alpha=0.005) == 22
    assert power_difference(22, 0.012, 0.0136, 0.005) == pytest.approx(power(22))
    # Difference, sd 1, effect 1 at 0.05: 10 seeds (power 0.803; 9 give 0.750).
    assert needed(sd=1.0, diff=1.0, alpha=0.05) == 10
    # Equivalence within ±1, true difference 0, each one-sided test at 0.05: 11 (Owen's exact TOST power).
    assert needed(sd=1.0, diff=0.0, alpha=0.05, margin=1.0) == 11
    assert power_equivalence(11, 0.0, 1.0, 1.0, 0.05) == pytest.approx(0.849, abs=0.002)  # 200,000 simulated: 0.8493
    assert power_equivalence(10, 0.0, 1.0, 1.0, 0.05) < 0.8
    assert needed(sd=1.0, diff=0.5, alpha=0.05, margin=1.0) > 11  # less room to spare
    assert needed(sd=1.0, diff=0.5, alpha=0.05, margin=0.5) is None
    assert needed(sd=0.0, diff=1.0, alpha=0.05) is None


def test_least_detectable_difference_is_seeds_needed_read_the_other_way() -> None:
    """The least |Δ| n seeds show with 80% power: where the noncentral t's power reaches 0.80, and so
    the effect at which `needed` asks for exactly n."""
    # Sd 1, α = 0.05: 10 seeds reach 0.803 at Δ = 1 (above), so the least detectable Δ is just under 1.
    d10 = least_detectable(10, 1.0, 0.05)
    assert 0.99 < d10 < 1.0 and power_difference(10, d10, 1.0, 0.05) == pytest.approx(0.80, abs=1e-6)
    assert needed(sd=1.0, diff=d10 * 1.001, alpha=0.05) == 10 and needed(sd=1.0, diff=d10 * 0.999, alpha=0.05) == 11
    # Many seeds: the normal approximation's (z_0.975 + z_0.80)·sd/√n = 2.8016/√1000 = 0.08859.
    assert least_detectable(1000, 1.0, 0.05) == pytest.approx(0.08859, rel=2e-3)
    assert math.isnan(least_detectable(1, 1.0, 0.05)) and math.isnan(least_detectable(5, 0.0, 0.05))
    assert needed(sd=1.0, diff=1e-6, alpha=0.05) == 10_001  # "more than ten thousand"
    # Speed-check rounds: The trimmed mean loses 2·⌊0.2n⌋ degrees of freedom, so it needs more rounds.
    assert needed(sd=1.0, diff=1.0, alpha=0.05, trim=0.2) > 10


def test_median_interval() -> None:
    r = median_interval([3.0, 1.0, 2.0, 5.0, 4.0])
    assert r.diff == 3.0 and 1.0 <= r.low <= 3.0 <= r.high <= 5.0
    assert median_interval([2.0, 2.0]).low == 2.0
    assert math.isnan(median_interval([2.0]).low)


def test_trimmed_mean_interval_by_hand() -> None:
    """The 20% trimmed mean (Tukey–McLaughlin): the mean of the middle 60%, its t-interval from the winsorized spread."""
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1000.0]  # one burst
    r = trimmed_mean_interval(x)
    assert r.diff == pytest.approx(stats.trim_mean(x, 0.2)) == pytest.approx(5.5)  # the burst moves nothing
    winsorized = [3.0, 3.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 8.0, 8.0]
    se = stats.tstd(winsorized) / (0.6 * math.sqrt(10))
    assert (r.se, r.df) == pytest.approx((se, 5))
    assert (r.low, r.high) == pytest.approx((5.5 - stats.t.ppf(0.975, 5) * se, 5.5 + stats.t.ppf(0.975, 5) * se))
    assert r.sd == pytest.approx(se * math.sqrt(10))  # what src.stats.verdicts.needed takes
    assert math.isnan(trimmed_mean_interval([1.0]).low)
    # By hand: winsorized squares 6·2.5² + 2·1.5² + 2·0.5² = 42.5, s_w² = 42.5/9; se = s_w/(0.6·√10) = 1.1453;
    # t(0.975, 5) = 2.5706: [2.5558, 8.4442], Wilcox's trimci (se = √winvar/((1 − 2·0.2)·√n)) to the digit.
    assert (r.low, r.high) == pytest.approx((2.5558, 8.4442), abs=1e-4)
    # Not Yuen's variance term ((n − 1)·s_w² / (h(h − 1)), h = 6 kept): that interval is 3.9% wider here.
    yuen = math.sqrt(9 * stats.tvar(winsorized) / (6 * 5))
    assert yuen / r.se == pytest.approx(1.0392, abs=1e-4) and r.se != pytest.approx(yuen)
