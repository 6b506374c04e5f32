"""The sequential sweeper's stopping rule: its error budget, and its error rates by simulation."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from src.stats.sequential import (
    CODES,
    DIFFERENT,
    EQUIVALENT,
    OBRIEN_FLEMING,
    POCOCK,
    SPENDING,
    UNDECIDABLE,
    UNDECIDED,
    Design,
    clopper_pearson,
    correct_code,
    fixed_seeds_for_power,
    look_at,
    naive_looks_error,
    simulate,
    simulate_differences,
    spent,
)

ALPHA, MARGIN, SD = 0.05, 0.01, 0.01
SWEEPS = 10_000
# Ten looks (3, 6, ..., 30 seeds): many chances to stop early on noise.
DESIGN = Design(first_seeds=3, seeds_per_round=3, max_seeds=30, alpha=ALPHA, spending=POCOCK, futility=0.0)
FUTILITY = 0.1  # conf/hydra/sweeper/sequential.yaml's default, checked below against the file
# The sweeper's default schedule (3, 5, 7, 9, 10 seeds), where futility and the spending function matter most.
DEFAULT = Design(3, 2, 10, ALPHA, OBRIEN_FLEMING, FUTILITY)


def test_levels_spend_the_budget_over_the_looks_and_the_family() -> None:
    assert DESIGN.looks() == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert math.isclose(sum(DESIGN.levels()), ALPHA)
    assert all(level > 0 for level in DESIGN.levels())
    # Pocock-type spending: the first look gets the largest share, so early stops are possible.
    assert DESIGN.levels()[0] == max(DESIGN.levels())
    shared = Design(3, 3, 30, ALPHA, POCOCK, 0.0, family=4)
    assert math.isclose(sum(shared.levels()), ALPHA / 4)
    assert Design(3, 2, 6, ALPHA, POCOCK, 0.0).looks() == [3, 5, 6]  # the last round is cut at max_seeds


def test_the_vectorised_rule_decides_like_the_per_look_rule() -> None:
    """The simulation and the sweeper's per-look decision (`look_at`, futility included) agree."""
    design = Design(3, 3, 30, ALPHA, POCOCK, FUTILITY)
    rng = np.random.default_rng(7)
    deltas = rng.choice([0.0, 0.004, 0.01, 0.02], size=200)
    d = deltas[:, None] + SD * rng.standard_normal((200, design.max_seeds))
    sim = simulate_differences(design, d, MARGIN)
    for row, code, seeds in zip(d, sim.decision, sim.seeds, strict=True):
        expected = (0, design.max_seeds)
        for k, n in enumerate(design.looks()):
            look = look_at(design, k, row[:n], MARGIN)
            if look.decision != UNDECIDED:
                expected = (CODES[look.decision], n)
                break
        assert (int(code), int(seeds)) == expected
    assert len(set(sim.decision.tolist())) == 4  # the sample exercises every outcome, futility included


def test_a_tie_reads_as_rounding_noise_does_and_both_rules_agree_on_it() -> None:
    """Two implementations of one function: their per-seed losses agree to the last bit on one machine
    and by a float32 ulp on another. The tie read "undecided (TOST p 0.25)" at 2 seeds by the sign-flip
    floor while the ulp's spread read "equivalent" by the t rule: the verdict came from the rounding.
    Both read equivalent now, in the per-look rule and the vectorised one alike; a difference with
    no spread beyond the margin still needs the sign-flip test's n equal signs."""
    design = Design(2, 1, 3, 0.001, POCOCK, 0.0, family=2)
    ulp = float(np.spacing(np.float32(3.6)))
    tie, noise = np.zeros(2), np.array([ulp, -ulp])
    decisions = {look_at(design, 0, d, MARGIN).decision for d in (tie, noise)}
    assert decisions == {EQUIVALENT}, decisions
    assert look_at(design, 0, tie, MARGIN).tost_p == 0.0
    shifted = np.full(2, 2 * MARGIN)  # no spread, beyond the margin: 2 equal signs give p 0.5
    assert look_at(design, 0, shifted, MARGIN).decision == UNDECIDED
    rows = np.array([[0.0, 0.0, 0.0], [ulp, -ulp, 0.0], [2 * MARGIN] * 3])
    sim = simulate_differences(design, rows, MARGIN)
    assert sim.decision.tolist() == [CODES[EQUIVALENT], CODES[EQUIVALENT], CODES[UNDECIDED]]


def test_the_spending_functions_and_the_defaults() -> None:
    for spending in SPENDING:
        levels = Design(3, 2, 10, ALPHA, spending, 0.0).levels()
        assert math.isclose(sum(levels), ALPHA) and all(x > 0 for x in levels)
        assert math.isclose(spent(ALPHA, 1.0, spending), ALPHA) and spent(ALPHA, 0.0, spending) == 0
    pocock, obf = (Design(3, 2, 10, ALPHA, s, 0.0).levels() for s in (POCOCK, OBRIEN_FLEMING))
    assert obf[0] < pocock[0] / 10 and obf[-1] > pocock[-1]  # O'Brien-Fleming keeps its budget for the end
    # Lan-DeMets O'Brien-Fleming type at t = 1/4: 2 - 2 Phi(1.95996 / 0.5) = 8.9e-5 for alpha 0.05.
    assert spent(ALPHA, 0.25, OBRIEN_FLEMING) == pytest.approx(8.87e-5, rel=1e-2)
    from src.core.paths import compose

    sweeper = compose(["hydra/sweeper=sequential"], with_hydra=True).hydra.sweeper
    assert (sweeper.spending, sweeper.futility) == (DEFAULT.spending, DEFAULT.futility)
    assert (sweeper.first_seeds, sweeper.seeds_per_round, sweeper.max_seeds) == (3, 2, 10)


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


def test_the_docstrings_figure_for_naive_looks() -> None:
    """src/stats/sequential.py: t-tests at 0.05 after 2, 4, ..., 10 seeds err 16.1% of the time under no
    effect, more than the 14.2% of z-tests at five looks (Armitage, McPherson and Rowe 1969, Table 2)."""
    rate = naive_looks_error([2, 4, 6, 8, 10], sweeps=50_000, seed=1)
    low, high = clopper_pearson(round(rate * 50_000), 50_000)
    assert low < 0.161 < high and low > 0.142
    assert naive_looks_error([5]) == pytest.approx(0.05, abs=0.002)  # one look: the fixed-n level


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
    family = Design(3, 3, 30, ALPHA, POCOCK, FUTILITY, family=4)
    rng = np.random.default_rng(9)
    wrong = np.zeros(SWEEPS, dtype=bool)
    for _ in range(4):
        sim = simulate_differences(family, SD * rng.standard_normal((SWEEPS, family.max_seeds)), MARGIN)
        wrong |= sim.decision == CODES[DIFFERENT]
    with capsys.disabled():
        print()
        _, low, _ = _report("family of 4: any false 'different' under no effect", int(wrong.sum()))
    assert low <= ALPHA


def test_futility_is_non_binding_and_keeps_the_error_rates(capsys: pytest.CaptureFixture[str]) -> None:
    """On the same draws, a sweep that errs with futility on errs the same way without it: stopping
    for futility only removes chances to decide. And the rates stay within alpha (10,000 sweeps each)."""
    rng = np.random.default_rng(12)
    for schedule in ((3, 2, 10), (3, 3, 30)):
        for spending in SPENDING:
            with_f = Design(*schedule, ALPHA, spending, FUTILITY)
            without = Design(*schedule, ALPHA, spending, 0.0)
            for delta, wrong in ((0.0, DIFFERENT), (MARGIN, EQUIVALENT)):
                d = delta + SD * rng.standard_normal((SWEEPS, with_f.max_seeds))
                on, off = simulate_differences(with_f, d, MARGIN), simulate_differences(without, d, MARGIN)
                err_on, err_off = on.decision == CODES[wrong], off.decision == CODES[wrong]
                assert not np.any(err_on & ~err_off)
                with capsys.disabled():
                    print() if (schedule, spending, delta) == ((3, 2, 10), POCOCK, 0.0) else None
                    _, low, _ = _report(f"{schedule} {spending}, futility {FUTILITY}: false {wrong!r} at Δ = {delta}",
                                        int(err_on.sum()))  # fmt: skip
                assert low <= ALPHA


def _summary(design: Design, delta: float, sd: float, seed: int) -> tuple[float, float, float]:
    sim = simulate(design, delta, sd, MARGIN, SWEEPS, seed=seed)
    return float(sim.seeds.mean()), sim.rate(correct_code(delta, MARGIN)), sim.rate(CODES[UNDECIDABLE])


def test_futility_saves_seeds_at_half_the_margin(capsys: pytest.CaptureFixture[str]) -> None:
    """Δ = margin/2 with seed noise = margin: ten seeds cannot settle it, and futility says so early,
    at a small cost in decisions where the budget would have sufficed."""
    off = Design(3, 2, 10, ALPHA, OBRIEN_FLEMING, 0.0)
    rows = {delta: (_summary(off, delta, SD, 20), _summary(DEFAULT, delta, SD, 20)) for delta in (MARGIN / 2, 0.0, 2 * MARGIN)}
    with capsys.disabled():
        print()
        for delta, ((s0, c0, _), (s1, c1, u1)) in rows.items():
            print(f"Δ {delta}: mean seeds {s0:.2f} -> {s1:.2f} with futility {FUTILITY} (right verdict {c0:.3f} -> {c1:.3f}, "
                  f"undecidable {u1:.3f})")  # fmt: skip
    (s0, c0, _), (s1, c1, u1) = rows[MARGIN / 2]
    assert s1 < 0.9 * s0 and u1 > 0.3 and c0 - c1 < 0.03
    for delta in (0.0, 2 * MARGIN):
        (s0, c0, _), (s1, c1, _) = rows[delta]
        assert s1 <= s0 and c0 - c1 < 0.06


def test_pocock_against_obrien_fleming_at_three_effect_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    """Why O'Brien-Fleming is the default for the default schedule: more power at every effect size,
    for about one more seed per variant; Pocock stops sooner."""
    with capsys.disabled():
        print()
        for delta in (0.0, MARGIN, 2 * MARGIN):
            (sp, cp, _), (so, co, _) = (_summary(replace(DEFAULT, spending=s), delta, SD, 30) for s in (POCOCK, OBRIEN_FLEMING))
            print(f"Δ {delta}, σ {SD}: Pocock {sp:.2f} seeds, power {cp:.3f}; O'Brien-Fleming {so:.2f} seeds, power {co:.3f}")
            assert co > cp and sp < so
