"""Each verdict word through the path that prints it (`compare`, then `against_study` and the words),
with the numbers that decide it, checked against scipy's own distributions: the cases a careful
reading found wrong, then the edges of the one rule (src/stats/verdicts.py): the interval beside a
word is the one that decided it, the speed margin is one factor either way in the speed section and
the claims alike, a bound reads one way, and no spread is said plainly.

The inputs are made-up sweeps at the study's setting (8×A100-class GPU, fp16, GPT-2 small) unless a
case is about the setting itself.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from study_runs import SEEDS, STUDY_SETTING, Z, judged_section, made_up_runs, section_text, study_runs

from src.report.files import claims_frame
from src.report.judge.pairs import Margins, compare
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.speed import Agreement, SpeedVerdict, decisions
from src.report.read.published import TABLE
from src.report.words.pairs import sentences, to_frame
from src.report.words.speed import decided_text, sentence
from src.report.words.study import (
    OWN_READING,
    claim_line,
    claim_reason,
    open_question,
    part_figure,
    part_reason,
)
from src.stats.inference import Interval
from src.stats.verdicts import (
    ClaimWord,
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

T95 = float(stats.t.ppf(0.975, 4))  # five seeds


def with_interval(mean: float, low: float, high: float) -> np.ndarray:
    """Five per-seed values whose mean and 95% t-interval are the ones stated."""
    assert math.isclose(high - mean, mean - low)
    return mean + Z * (high - mean) * math.sqrt(5) / T95


def claims_of(runs: pd.DataFrame, **kw: object) -> dict[int, object]:
    return {c.claim.number: c for c in judged_section(runs, **kw).claims}


def _time_as_tokens(base: np.ndarray, change: np.ndarray) -> np.ndarray:
    """tokens/s of b whose training time is (1 + change) × a's, seed by seed."""
    return base / (1 + change)


def test_1_an_interval_beyond_the_claimed_size_is_not_reproduced_whatever_the_margin() -> None:
    """Claim 3's built-ins at -2.4% [-3.2%, -1.5%] (the ±2% margin straddled), claim 4's built-in at
    +0.007 [+0.002, +0.012] nats (the ±0.01 margin straddled)."""
    time = with_interval(-0.024, -0.0325, -0.0155)
    loss = with_interval(0.007, 0.002, 0.012)
    base = np.full(5, 1000.0)
    runs = study_runs(loss={"torch_layernorm": SEEDS, "torch_rmsnorm": SEEDS + loss},
                       speed={"torch_layernorm": base, "torch_rmsnorm": _time_as_tokens(base, time)})  # fmt: skip
    pair = {r.metric: r for r in compare(runs, Margins())}
    assert (pair["test_loss"].primary.low, pair["test_loss"].primary.high) == pytest.approx((0.002, 0.012))
    claims = claims_of(runs)
    built_ins = claims[3].findings[0]
    assert built_ins.high < -0.0055 and built_ins.low < -0.02 < built_ins.high  # beyond ±0.55%, straddling ±2%
    assert built_ins.word == ClaimWord.NOT_REPRODUCED
    assert part_reason(built_ins).startswith("the whole interval lies beyond the study's ±0.55%: no seed count makes them that close")
    # Claim 4's interval holds the claimed 0.0065 as well as values beyond the margin: the size is
    # not decided either, so it stays inconclusive, and says what would settle it.
    built_in = claims[4].findings[0]
    assert built_in.low < 0.0065 < 0.01 < built_in.high
    assert built_in.word == ClaimWord.INCONCLUSIVE
    assert "the interval straddles the margin (±0.01 nats) and overlaps the study's ±0.0065: about" in part_reason(built_in)


def _five(**columns: object) -> pd.DataFrame:
    runs = study_runs({v: SEEDS for v in TABLE})
    for key, value in columns.items():
        runs[key] = value
    return runs


def _set(runs: pd.DataFrame, rows: pd.Series, outcome: str, step: float) -> None:
    runs.loc[rows, ["outcome", "stopped_at_step", "steps_done"]] = [outcome, step if outcome == "diverged" else math.nan, step]


def test_2_a_crash_is_not_training() -> None:
    runs = _five()
    _set(runs, runs.variant == "no_norm", "diverged", 530.0)
    _set(runs, runs.variant != "no_norm", "failed", 10.0)
    claim = claims_of(runs)[6]
    assert claim.word == ClaimWord.INCONCLUSIVE
    assert claim_reason(claim) == ("none of the normalized variants' runs counts; left out: the normalized variants' 20 failed "
                            "run(s) at step 10, which neither trained through nor diverged")  # fmt: skip


def test_3_one_late_divergence_does_not_undo_the_contrast() -> None:
    runs = _five()
    _set(runs, runs.variant == "no_norm", "diverged", 530.0)
    _set(runs, runs.run_id == "torch_rmsnorm4", "diverged", 33_000.0)
    claim = claims_of(runs)[6]
    # Fisher's exact one-sided p: 5 of the 6 divergences among no_norm's 5 runs out of 25.
    p = float(stats.hypergeom.sf(4, 25, 6, 5))
    assert p == pytest.approx(6 / 53_130)
    assert claim.word == ClaimWord.REPRODUCED
    assert claim_reason(claim) == (f"no_norm diverged in 5/5 runs (step 530 each), the normalized variants in 1/20 (step 33,000): "
                            f"more often than chance allows (Fisher's exact p = {p:.2g})")  # fmt: skip


def test_4_bf16_is_not_the_studys_16_bit() -> None:
    runs = _five(precision="bf16_mixed (matmul precision high)")
    claim = claims_of(runs)[6]  # no_norm trains through
    assert claim.word == ClaimWord.NOT_APPLICABLE
    (why,) = claim.findings[0].outside  # said in full once, in the section's setting line
    assert why.startswith("precision bf16_mixed, not the study's fp16 autocast (bf16 and fp32 keep fp32's exponent range)")
    assert claim_reason(claim).startswith(f"outside its domain: precision bf16_mixed ({OWN_READING}: not reproduced: no NaN in 33165 steps, "
                                   "past step 530")  # fmt: skip


def test_5_every_claim_has_a_line() -> None:
    section = section_text(study_runs({"torch_layernorm": SEEDS, "torch_rmsnorm": SEEDS + 0.001}))
    assert sorted(c.claim.number for c in section.judged.claims) == [3, 4]
    lines = {line.split(".", 1)[0]: line for line in section.items() if line[:2] in {f"{n}." for n in range(1, 8)}}
    assert sorted(lines) == list("1234567")
    assert all(lines[n].startswith(f"{n}. not tested here — ") for n in "12567")
    assert lines["1"].endswith("→ needs hand_layernorm, hand_rmsnorm (not swept).")
    assert lines["2"].endswith("→ needs hand_layernorm, hand_rmsnorm (not swept).")
    assert lines["6"].endswith("→ needs no_norm (not swept).")
    assert lines["7"].endswith("→ needs hand_rmsnorm (not swept).")
    assert section.short_items()[6].startswith("7. not tested here — the kernel effect completely overshadows the norm-math effect")


def test_6_no_method_line_and_no_confidence_without_an_interval() -> None:
    section = section_text(study_runs({"hand_layernorm": SEEDS[:1], "torch_layernorm": SEEDS[:1] - 0.02}, seeds=1))
    assert section.judged.family == 0 and section.method == ""
    assert not any("simultaneous" in line for line in section.items())
    frame = claims_frame(section.judged)
    assert len(frame) and frame.confidence.isna().all()


def test_7_seeds_to_settle_come_from_the_exact_t_power() -> None:
    """A claim part's paired difference of -0.012 (SD 0.0136) read at α = 0.05 / 10 = 0.005: 22
    seeds by the noncentral t (21 by the normal-quantile shortcut)."""
    diff = -0.012 + 0.0136 * np.array([-1.0, 0.0, 1.0])  # three seeds: mean -0.012, SD 0.0136
    loss = {"hand_layernorm": SEEDS[:3], "torch_layernorm": SEEDS[:3] + diff,
            "hand_rmsnorm": SEEDS[:3] + 0.002, "torch_rmsnorm": SEEDS[:3] + 0.002 + diff[::-1]}  # fmt: skip
    section = judged_section(study_runs(loss, seeds=3))
    assert section.family == 10  # ten claim parts with an interval: each at 1 - 0.005
    ln = next(c for c in section.claims if c.claim.number == 5).findings[0]
    assert ln.word == ClaimWord.INCONCLUSIVE and part_reason(ln).endswith("about 22 seeds would settle it")

    def power(n: int) -> float:
        c, nc = stats.t.ppf(1 - 0.005 / 2, n - 1), 0.012 / 0.0136 * math.sqrt(n)
        return stats.nct.sf(c, n - 1, nc) + stats.nct.cdf(-c, n - 1, nc)

    assert power(21) < 0.8 <= power(22)


def test_8_a_sequential_sweep_says_what_its_words_promise() -> None:
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + np.array([0.0002, -0.0003, 0.0001, 0.0, -0.0001])})
    decided = SequentialVerdict("torch_layernorm vs hand_layernorm", "test_loss", "different", 2, 4, 0.02, math.nan)
    section = section_text(runs, sequential=(decided,))
    assert "the words they decide hold together at 95%" in section.method
    assert ("For the 1 part(s) the sequential sweep decided, direction and equivalence are its decisions, error-controlled at "
            "the sweep's own alpha over its looks") in section.method and "not on this 95%" in section.method  # fmt: skip


def test_9_sources_not_issue_numbers_and_one_reason_everywhere() -> None:
    runs = made_up_runs({v: v for v in TABLE}, device="cpu", precision="fp32 (matmul precision highest)")
    runs.loc[runs.variant == "no_norm", "lr"] = 1e6  # the tiny sweep's collapse: another learning rate
    section = section_text(runs)
    assert "the study's post" in section.lead() and "the author's published run configs" in section.lead()
    assert "issue" not in "\n".join(section.lines())
    claim = next(c for c in section.judged.claims if c.claim.number == 6)
    assert "Study: NaN by step 530 (training typically collapses within about 100 steps)" in claim_line(claim)
    row = claims_frame(section.judged).query("claim == 6").iloc[0]
    assert row.claim_reason == claim_reason(claim) and "not like for like" in claim_reason(claim)  # claims.csv and the terminal agree
    assert row.reason.startswith("precision fp32, not the study's fp16 autocast")  # the part's own, in full
    assert "precision fp32, not the study's 16-bit autocast" in "\n".join(section.lines())  # said once, above the claims


def test_10_the_gpu_is_in_the_speed_domain() -> None:
    check = {"hand_layernorm": 14.0, "torch_layernorm": 4.0, "hand_rmsnorm": 12.0, "torch_rmsnorm": 4.0, "no_norm": 0.0}
    from study_runs import speed_check

    h100 = made_up_runs({v: v for v in TABLE}, **{**STUDY_SETTING, "device_name": "NVIDIA H100 80GB HBM3", "precision": "bf16_mixed"})
    claims = claims_of(h100, check=speed_check(check))
    assert claims[1].word == ClaimWord.NOT_APPLICABLE
    assert claim_reason(claims[1]).startswith(f"outside its domain: NVIDIA H100 80GB HBM3 run ({OWN_READING}: ")
    assert claims[1].findings[0].outside[0].startswith("NVIDIA H100 80GB HBM3 run: the study timed A100s, and a norm's share of a "
                                                       "step moves with the chip's bandwidth-to-compute ratio")  # fmt: skip
    assert claims[4].word != ClaimWord.NOT_APPLICABLE  # the loss's math does not depend on the chip
    a100 = claims_of(made_up_runs({v: v for v in TABLE}, **STUDY_SETTING), check=speed_check(check))
    assert a100[2].word == ClaimWord.PARTLY and "the study on 8, whose all-reduce is part of its step time" in claim_reason(a100[2])


def test_a_small_real_effect_is_said_as_such_by_the_pair_and_the_claim() -> None:
    base = np.full(5, 1000.0) + np.arange(5)
    jitter = 1 + np.array([0.001, -0.001, 0.0005, 0.0, -0.0005])
    runs = study_runs(loss={"torch_layernorm": SEEDS, "torch_rmsnorm": SEEDS + 0.003 + np.array([2, -2, 1, 0, -1]) * 1e-4},
                       speed={"torch_layernorm": base, "torch_rmsnorm": base * 1.014 * jitter})  # fmt: skip
    (pair,) = compare(runs, Margins())  # test loss: the jobs' tokens/s is not judged pair by pair
    assert pair.verdict == PairWord.EQUIVALENT and pair.decision.remains
    # comparisons.csv: the words without numbers, beside them the interval they were read from and its level
    # (TOST's 90%), apart from the test's own 95% ci_low/ci_high.
    row = to_frame([pair]).query("test == 'paired_t'").iloc[0]
    assert row.verdict == "equivalent within ±0.01, a difference remains"
    assert (row.verdict_level, row.verdict_low, row.verdict_high) == pytest.approx((0.9, pair.decision.low, pair.decision.high))
    assert row.ci_low < row.verdict_low < 0.003 < row.verdict_high < row.ci_high
    built_ins = claims_of(runs)[3].findings[0]
    assert built_ins.readings.excludes_zero and part_reason(built_ins).startswith("equivalent within ±2% (a difference of -1.4% [")


def test_claim_4_holds_in_any_precision_so_a_swept_precision_keeps_it_in_its_domain() -> None:
    """`norm=hand_layernorm,hand_rmsnorm precision=fp32,bf16_mixed` at the study's scale: claim 4
    (the math's loss, any precision) is judged on the sweep's variants; claim 2 (16-bit kernels' speed)
    reads the bf16 ones, inside its 16-bit-autocast domain, as it would were precision not swept."""
    from study_runs import study_section

    from src.report.read.table import summarize
    from src.tracking.variants import Axis

    loss = SEEDS + 0.004 + np.array([2, -2, 1, 0, -1]) * 1e-4
    frames = []
    for precision in ("fp32", "bf16_mixed"):
        runs = study_runs({"hand_layernorm": SEEDS, "hand_rmsnorm": loss})
        runs = runs.assign(**{"axis.precision": precision, "precision": f"{precision} (matmul precision high)"})
        frames.append(runs.assign(variant=runs.variant + f" · {precision}", run_id=runs.run_id + precision))
    runs = pd.concat(frames, ignore_index=True)
    section = study_section(runs, (Axis("precision", ("precision.name",)),), {}, Margins(), summarize(runs)).judged
    claims = {c.claim.number: c for c in section.claims}
    (part,) = claims[4].findings
    assert part.word == ClaimWord.REPRODUCED and "not the study's setting" not in part_reason(part), part_reason(part)
    assert part.estimate == pytest.approx(0.004)
    (speed,) = claims[2].findings
    assert speed.word != ClaimWord.NOT_APPLICABLE and speed.variants == ("hand_layernorm · bf16_mixed", "hand_rmsnorm · bf16_mixed")


def test_the_open_question_says_why_no_spread_is_measured_not_one_seed_on_three() -> None:
    """Three seeds of post-norm variants: none is the study's setting, so no spread is measured here,
    and the line says that, not "one seed per variant"."""
    runs = made_up_runs({v: v for v in list(TABLE)[:4]}, seeds=3, **{**STUDY_SETTING, "model.norm_placement": "post"})
    after = open_question(claims_of(runs)[5])
    assert "one seed per variant" not in after and "no variant of it ran at the study's setting" in after, after


def _alike(seeds: int, loss: dict[str, float]) -> dict[int, object]:
    """A sweep whose variants' test losses differ from hand_layernorm's by exactly the same amount on every seed."""
    base = np.linspace(3.58, 3.62, seeds)
    return judged_section(study_runs({"hand_layernorm": base} | {v: base + d for v, d in loss.items()}, seeds=seeds))


@pytest.mark.parametrize(
    ("seeds", "loss", "claim", "word", "reason"),
    [
        # Five equal signs give a sign-flip p of 1/16 at best: nothing shown at the family's level, and no
        # zero-width "interval" standing in for one (it once read the study's size as met, exactly).
        (5, {"torch_layernorm": -0.0242}, 5, ClaimWord.INCONCLUSIVE,
         "every one of 5 seeds moved by exactly -0.0242: no spread, so no interval; sign-flip p = 0.062, not below the family's {alpha:.2g}: "
         "about {settle} seeds would settle it"),
        # Twelve show the direction; the size is not tested on a zero-width interval (it once read "reproduced").
        (12, {"torch_layernorm": -0.0242}, 5, ClaimWord.PARTLY,
         "the study's direction (every one of 12 seeds moved by exactly -0.0242: no spread, so no interval; sign-flip p = 0.00049): "
         "no interval to hold against its -0.0242"),
        (12, {"torch_layernorm": 0.012}, 5, ClaimWord.NOT_REPRODUCED,
         "the opposite direction (every one of 12 seeds moved by exactly +0.0120: no spread, so no interval; sign-flip p = 0.00049)"),
        (12, {"torch_layernorm": 0.0}, 5, ClaimWord.NOT_REPRODUCED,
         "equivalent to zero within ±0.01 nats, where the study has -0.0242 (every one of 12 seeds moved by exactly +0.0000: no spread, "
         "so no interval; sign-flip p = 0.00049)"),
        # An equivalence: shown within the margin, its closeness to the study's ±0.0065 not tested.
        (12, {"hand_rmsnorm": 0.001}, 4, ClaimWord.PARTLY,
         "equivalent within ±0.01 nats (a difference of +0.0010 remains; every one of 12 seeds moved by exactly +0.0010: no spread, "
         "so no interval; sign-flip p = 0.00049): no interval to hold against the study's ±0.0065"),
        (12, {"hand_rmsnorm": 0.012}, 4, ClaimWord.NOT_REPRODUCED,
         "they differ by ±0.01 nats or more (a bound itself is a difference that matters; every one of 12 seeds moved by exactly "
         "+0.0120: no spread, so no interval; sign-flip p = 0.00049)"),
    ],
)
def test_a_claim_whose_every_seed_moved_alike_reads_the_sign_flip_bound_and_no_size(
    seeds: int, loss: dict[str, float], claim: int, word: ClaimWord, reason: str
) -> None:
    section = _alike(seeds, loss)
    alpha = 0.05 / section.family
    settle = next(n for n in range(2, 100) if 2 * 0.5**n < alpha)  # n equal signs reach the family's level
    part = next(c for c in section.claims if c.claim.number == claim).findings[0]
    assert (part.word, part_reason(part)) == (word, reason.format(alpha=alpha, settle=max(settle, seeds + 1)))
    assert "no interval" in part_figure(part) and "[" not in part_figure(part)  # no zero-wide [x, x] printed as an interval


def test_the_open_question_does_not_call_equal_signs_an_interval() -> None:
    claim = next(c for c in _alike(12, {"torch_layernorm": -0.0242}).claims if c.claim.number == 5)
    assert open_question(claim).endswith("-0.0242 nats (paired over 12 seeds, every seed alike: no interval): real at this setting "
                                "(shown for every part, by its interval or its equal signs), so the edge is not seed noise alone.")  # fmt: skip


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
    rounds = Interval("tukey_mclaughlin", 200, estimate, estimate - 1e-5, estimate + 1e-5, 1e-30, 5e-6, 119.0, 5e-6 * math.sqrt(200))
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
        return Interval("tukey_mclaughlin", len(arr), float(arr.mean()), float(arr.mean()) - half, float(arr.mean()) + half, math.nan, se, len(arr) - 1.0)

    predicted = interval(kernel_rounds)
    (d,) = decisions([predicted], 0.02)
    return SpeedVerdict("a", "b", predicted, interval(step_rounds), None, d, 0.02)


def test_whole_steps_check_the_prediction_only_when_precise() -> None:
    """An interval wider than the margin that holds the prediction checks nothing; precise intervals apart
    disagree, whichever is the wider (never "too noisy")."""
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
