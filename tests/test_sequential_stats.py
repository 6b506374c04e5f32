"""The sequential sweeper's stopping rule: its error budget, and its error rates by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from src.report.sequential_stats import (
    CODES,
    DIFFERENT,
    EQUIVALENT,
    Design,
    clopper_pearson,
    decide,
    fixed_seeds_for_power,
    simulate,
    simulate_differences,
)

ALPHA, MARGIN, SD = 0.05, 0.01, 0.01
SWEEPS = 10_000
# Ten looks (3, 6, ..., 30 seeds): many chances to stop early on noise.
DESIGN = Design(first_seeds=3, seeds_per_round=3, max_seeds=30, alpha=ALPHA)


def test_levels_spend_the_budget_over_the_looks_and_the_family() -> None:
    assert DESIGN.looks() == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert math.isclose(sum(DESIGN.levels()), ALPHA)
    assert all(level > 0 for level in DESIGN.levels())
    # Pocock-type spending: the first look gets the largest share, so early stops are possible.
    assert DESIGN.levels()[0] == max(DESIGN.levels())
    shared = Design(3, 3, 30, ALPHA, family=4)
    assert math.isclose(sum(shared.levels()), ALPHA / 4)
    assert Design(3, 2, 6, ALPHA).looks() == [3, 5, 6]  # the last round is cut at max_seeds


def test_the_vectorised_rule_decides_like_the_per_look_rule() -> None:
    rng = np.random.default_rng(7)
    deltas = rng.choice([0.0, 0.004, 0.01, 0.02], size=200)
    d = deltas[:, None] + SD * rng.standard_normal((200, DESIGN.max_seeds))
    sim = simulate_differences(DESIGN, d, MARGIN)
    for row, code, seeds in zip(d, sim.decision, sim.seeds, strict=True):
        expected = (0, DESIGN.max_seeds)
        for n, level in zip(DESIGN.looks(), DESIGN.levels(), strict=True):
            look = decide(row[:n], MARGIN, level)
            if look.decision != "undecided":
                expected = (CODES[look.decision], n)
                break
        assert (int(code), int(seeds)) == expected
    assert len(set(sim.decision.tolist())) == 3  # the sample exercises every outcome


def _report(label: str, errors: int) -> tuple[float, float, float]:
    low, high = clopper_pearson(errors, SWEEPS)
    rate = errors / SWEEPS
    print(
        f"{label}: {rate:.4f} (95% Clopper-Pearson [{low:.4f}, {high:.4f}]) over {SWEEPS:,} sweeps, alpha {ALPHA}"
    )
    return rate, low, high


def test_error_rates_hold_alpha_under_repeated_looks(capsys: pytest.CaptureFixture[str]) -> None:
    null = simulate(DESIGN, 0.0, SD, MARGIN, SWEEPS, seed=1)  # no effect: "different" is an error
    at_margin = simulate(DESIGN, MARGIN, SD, MARGIN, SWEEPS, seed=2)  # effect at the margin: "equivalent" is
    with capsys.disabled():
        print()
        _, low_d, _ = _report(
            "false 'different' under no effect", int(np.sum(null.decision == CODES[DIFFERENT]))
        )
        _, low_e, _ = _report(
            "false 'equivalent' at the margin", int(np.sum(at_margin.decision == CODES[EQUIVALENT]))
        )
    assert low_d <= ALPHA and low_e <= ALPHA


def test_testing_every_look_at_alpha_would_fail_the_check() -> None:
    """The check above can fail: the naive rule (each look at the fixed-n level) breaks it."""
    rng = np.random.default_rng(3)
    naive = simulate_differences(
        DESIGN,
        SD * rng.standard_normal((SWEEPS, DESIGN.max_seeds)),
        MARGIN,
        levels=[ALPHA] * len(DESIGN.looks()),
    )
    low, _ = clopper_pearson(int(np.sum(naive.decision == CODES[DIFFERENT])), SWEEPS)
    assert low > ALPHA


def test_sequential_uses_fewer_seeds_than_a_fixed_design_of_equal_power(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Truly equivalent variants (the difference is 0, seed noise half the margin).
    sd = MARGIN / 2
    seq = simulate(DESIGN, 0.0, sd, MARGIN, SWEEPS, seed=4)
    power = seq.rate(CODES[EQUIVALENT])
    fixed = fixed_seeds_for_power(power, 0.0, sd, MARGIN, ALPHA, SWEEPS, most=DESIGN.max_seeds, seed=5)
    with capsys.disabled():
        print(
            f"\nequivalence, sd = margin/2: sequential power {power:.3f} with {seq.seeds.mean():.2f} seeds on average"
            f" (median {np.median(seq.seeds):.0f}); a fixed design needs {fixed} seeds for the same power"
        )
    assert fixed is not None and seq.seeds.mean() < fixed


def test_the_family_error_rate_holds_alpha(capsys: pytest.CaptureFixture[str]) -> None:
    """Four comparisons under no effect share alpha (Bonferroni): any false 'different' is an error.

    Each comparison stops on its own (a decided one keeps its verdict), so the sweeps are simulated
    per comparison and an error anywhere in the family counts once.
    """
    family = Design(3, 3, 30, ALPHA, family=4)
    rng = np.random.default_rng(9)
    wrong = np.zeros(SWEEPS, dtype=bool)
    for _ in range(4):
        sim = simulate_differences(family, SD * rng.standard_normal((SWEEPS, family.max_seeds)), MARGIN)
        wrong |= sim.decision == CODES[DIFFERENT]
    with capsys.disabled():
        print()
        _, low, _ = _report("family of 4: any false 'different' under no effect", int(wrong.sum()))
    assert low <= ALPHA
