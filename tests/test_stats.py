"""Seed statistics against hand-worked formulas and textbook numbers."""

from __future__ import annotations

import math

import pytest

from src.report.stats import mean_ci, welch

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
    assert d.distinguishable


def test_welch_unequal_sizes_by_hand() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0]
    va, vb = sample_var(a) / 4, sample_var(b) / 5  # 5/12 and 2
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 4)
    d = welch(a, b)
    assert d.diff == pytest.approx(3.5)
    assert d.df == pytest.approx(df)
    assert d.relative == pytest.approx(3.5 / 2.5)


def test_overlapping_seeds_are_not_distinguishable() -> None:
    d = welch([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert d.testable and not d.distinguishable
    assert d.low < 0 < d.high and d.p_value > 0.05


def test_welch_with_one_seed_is_not_testable() -> None:
    d = welch([1.0], [2.0, 3.0])
    assert d.diff == pytest.approx(1.5)
    assert not d.testable and not d.distinguishable
    assert math.isnan(d.p_value) and math.isnan(d.low)
