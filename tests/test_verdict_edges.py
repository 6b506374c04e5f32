"""The edges of the one rule (src/stats/verdicts.py), each through the path that prints it: the
interval beside a word is the one that decided it, the speed margin is one factor either way in the
speed section and the claims alike, a bound reads one way, and no spread is said plainly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from study_runs import SEEDS, study_runs

from src.report.judge.pairs import Margins, compare
from src.report.judge.speed import Agreement, SpeedVerdict, decisions
from src.report.words.pairs import sentences
from src.report.words.speed import decided_text, sentence
from src.stats.inference import Interval
from src.stats.verdicts import (
    Direction,
    Equivalence,
    PairWord,
    Size,
    SpeedWord,
    read,
    read_alike,
    speed_bounds,
    speed_word,
)

Z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / np.std([-2.0, -1.0, 0.0, 1.0, 2.0], ddof=1)  # mean 0, SD 1


def test_an_equivalence_prints_toSTs_interval_the_one_that_decided_it() -> None:
    """Mean +0.0062, SE 0.0016, five seeds: TOST's 90% interval [+0.0028, +0.0096] lies inside ±0.01,
    the 95% one [+0.0018, +0.0106] does not; the line prints the 90% one beside *equivalent*."""
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.0062 + Z * 0.0016 * math.sqrt(5)})
    (pair,) = compare(runs, Margins())
    assert pair.primary.se == pytest.approx(0.0016) and pair.primary.high > 0.01  # the 95% interval crosses the margin
    assert pair.verdict == PairWord.EQUIVALENT
    t90 = float(stats.t.ppf(0.95, 4)) * 0.0016
    assert (pair.decision.low, pair.decision.high) == pytest.approx((0.0062 - t90, 0.0062 + t90))
    (line,) = sentences([pair])
    assert "[+0.0028, +0.0096] (90% interval), TOST's interval" in line and "+0.0106" not in line, line


def test_the_speed_margin_is_one_factor_either_way_in_the_section_and_the_claims() -> None:
    """−1.971% of step time is beyond 1/1.02 − 1 = −1.961%: *faster* in the speed section, and not
    inside the claims' equivalence region either (which read ±2% as the same factor)."""
    lower, upper = speed_bounds(0.02)
    assert (lower, upper) == pytest.approx((1 / 1.02 - 1, 0.02))
    estimate = math.log1p(-0.01971)
    rounds = Interval("yuen_trimmed", 200, estimate, estimate - 1e-5, estimate + 1e-5, 1e-30, 5e-6, 119.0, 5e-6 * math.sqrt(200))
    (d,) = decisions([rounds], 0.02)
    assert speed_word(d) == SpeedWord.FASTER
    relative = (math.expm1(rounds.low), math.expm1(rounds.high))
    assert read(*relative, sign=-1, band=(-0.03, -0.01), margin=0.02, bounds=(lower, upper)).equivalence == Equivalence.OUTSIDE
    # Written as a symmetric ±2% of the change, it would have read inside: the two sections disagreed.
    assert read(*relative, sign=-1, band=(-0.03, -0.01), margin=0.02).equivalence == Equivalence.INSIDE


@pytest.mark.parametrize(
    ("low", "high", "direction", "size", "equivalence"),
    [
        (0.0, 0.004, Direction.UNDECIDED, Size.CONSISTENT, Equivalence.INSIDE),  # touches zero: does not exclude it
        (0.01, 0.012, Direction.HOLDS, Size.LARGER, Equivalence.OUTSIDE),  # at the margin: outside, never inside
        (-0.012, -0.01, Direction.OPPOSITE, Size.SMALLER, Equivalence.OUTSIDE),
        (0.006, 0.008, Direction.HOLDS, Size.CONSISTENT, Equivalence.INSIDE),  # touches the band's top: meets it
        (0.008 + 1e-12, 0.009, Direction.HOLDS, Size.LARGER, Equivalence.INSIDE),
    ],
)
def test_a_value_at_a_bound_reads_one_way(low: float, high: float, direction: Direction, size: Size, equivalence: Equivalence) -> None:
    r = read(low, high, sign=1, band=(0.002, 0.008), margin=0.01)
    assert (r.direction, r.size, r.equivalence) == (direction, size, equivalence)


def test_no_spread_is_said_plainly_with_the_sign_flip_bound_never_p_0() -> None:
    """Every seed moved by exactly −0.0234: no interval, and five equal signs give a sign-flip p of
    1/16 at best: not *different* at 0.05, and the line says why (it read p = 0 before)."""
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0234})
    (pair,) = compare(runs, Margins())
    assert pair.primary.p_value == pytest.approx(1 / 16) and not pair.decision.spread
    assert pair.verdict == PairWord.INCONCLUSIVE and pair.seeds == 6  # six equal signs reach 1/32 < 0.05
    (line,) = sentences([pair])
    assert "every one of 5 seeds moved by exactly -0.0234: no spread, so no interval" in line, line
    assert "difference p = 0.062" in line and "CI" not in line and "p = 0)" not in line
    assert "about 6 seeds would settle it" in line
    # Six of them: the sign-flip floor 1/32 is below 0.05, and the pair is different.
    six = study_runs({"hand_layernorm": np.append(SEEDS, 3.6), "torch_layernorm": np.append(SEEDS, 3.6) - 0.0234}, seeds=6)
    assert compare(six, Margins())[0].verdict == PairWord.DIFFERENT


def _verdict(step_rounds: list[float], kernel_rounds: list[float]) -> SpeedVerdict:
    def interval(x: list[float]) -> Interval:
        arr = np.log1p(np.asarray(x))
        se = float(np.std(arr, ddof=1) / math.sqrt(len(arr)))
        half = float(stats.t.ppf(0.975, len(arr) - 1)) * se
        return Interval("yuen_trimmed", len(arr), float(arr.mean()), float(arr.mean()) - half, float(arr.mean()) + half, math.nan, se, len(arr) - 1.0)

    predicted = interval(kernel_rounds)
    (d,) = decisions([predicted], 0.02)
    return SpeedVerdict("a", "b", predicted, interval(step_rounds), None, d, 0.02)


def test_whole_steps_check_the_prediction_only_when_precise() -> None:
    """An interval wider than the margin checks nothing, apart or not; precise intervals apart disagree,
    whichever is the wider (never "too noisy")."""
    rng = np.random.default_rng(0)
    kernel = list(0.05 + rng.normal(0, 0.001, 30))
    wide = _verdict(list(-0.05 + rng.normal(0, 0.2, 30)), kernel)
    assert wide.agreement == Agreement.TOO_IMPRECISE and "too imprecise to check the prediction" in sentence(wide)
    steady = _verdict(list(0.02 + rng.normal(0, 0.0005, 30)), kernel)
    assert steady.agreement == Agreement.DISAGREE and "noisy" not in sentence(steady)
    assert "the whole step moved by other than the norms' own cost" in sentence(steady)
    assert decided_text(steady.predicted, steady.decision).endswith("] (95% interval)")  # every interval says its level


@pytest.mark.parametrize(
    ("diff", "n", "alpha", "direction", "equivalence"),
    [
        (-0.02, 5, 0.0625, Direction.UNDECIDED, Equivalence.UNDECIDED),  # 2/2⁵ = 1/16 exactly at α: not below it
        (-0.02, 5, 0.0626, Direction.HOLDS, Equivalence.OUTSIDE),  # just below: shown, and at or beyond ±0.01
        (0.02, 6, 0.05, Direction.OPPOSITE, Equivalence.OUTSIDE),
        (0.01, 6, 0.05, Direction.OPPOSITE, Equivalence.OUTSIDE),  # exactly at the margin: a bound is a difference that matters
        (0.0, 6, 0.05, Direction.UNDECIDED, Equivalence.INSIDE),  # no sign to show, but all within the margin
    ],
)
def test_a_claim_part_with_no_spread_reads_n_equal_signs_and_no_size(
    diff: float, n: int, alpha: float, direction: Direction, equivalence: Equivalence
) -> None:
    r = read_alike(diff, n, -1, 0.01, alpha)
    assert (r.direction, r.equivalence, r.size, r.spread) == (direction, equivalence, Size.UNTESTED, False)
    assert r.alike_p == 2 * 0.5**n and r.holds_zero == (direction == Direction.UNDECIDED)
