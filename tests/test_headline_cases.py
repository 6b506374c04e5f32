"""The pairs' words and the headline that reads them, each case through the real path (`compare` on
made-up runs, then src.report.words.pairs, `against_study` and `headline`).

The pairs: the family printed is the one Holm adjusted over, a spread below the values' resolution
reads as no spread, no p prints as 0, every interval says its level, and an *inconclusive* beside a
95% interval that excludes zero carries the Holm p that decided it.

The headline, at the study's setting (tests/study_runs.py): uneven seed sets, a failed seed, seed
sets that share none (Welch), a learning-rate sweep, a divergence, a tie as printed; and "lowest"
only where the pairs establish it: the shared seed against Welch, runs of which some diverged
counted, bit-identical and near-identical variants said as ties.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
from study_runs import NOISE, SEEDS, Z, jitter, judged_section, made_up_runs, study_runs

from src.core.schema import MarginSchema
from src.report.analysis import Analysis
from src.report.judge.pairs import Margins, Result, compare, family_of
from src.report.numbers import NATS, NATS_AS_IS, estimate_text, p_text
from src.report.read.published import TABLE
from src.report.read.table import summarize
from src.report.words.headline import headline, loss_line, real_line, settings_of
from src.report.words.pairs import heading, sentences, to_frame, verdict_text
from src.stats.inference import RESOLUTION, paired_t, trimmed_mean_interval, welch
from src.stats.verdicts import PairWord


def _analysis(runs: pd.DataFrame) -> Analysis:
    results = compare(runs, Margins())
    return Analysis("cases", "sqlite://", "0", runs, pd.DataFrame(), summarize(runs), results, Margins(), 0, study=judged_section(runs))


def _pair(a: Analysis, x: str, y: str) -> Result:
    return next(r for r in a.comparisons if r.metric == "test_loss" and {r.a, r.b} == {x, y})


def _gap_text(r: Result, best: str) -> tuple[float, str]:
    """The gap of the other variant to `best` as its pair's judgement has it, and its interval as printed."""
    sign = 1 if r.a == best else -1
    low, high = sorted((sign * r.decision.low, sign * r.decision.high))  # the interval the word was read from
    units = NATS if r.decision.sign else NATS_AS_IS  # a difference shown never prints as +0.0000
    estimate = estimate_text(sign * r.primary.diff, low, high, r.decision.level, units)
    return sign * r.primary.diff, f"{estimate} {verdict_text(r)}"


def _reseed(runs: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    return runs.assign(seed=seeds, run_id=[f"{v}{s}" for v, s in zip(runs.variant, seeds, strict=True)])


def test_uneven_seed_sets_the_lowest_is_the_paired_one_not_the_table_mean() -> None:
    """A on seeds 0-4, B on 0, 1, 2, 7 and lower on every shared seed; B's seed 7 is high, so the table's
    unpaired means put A first (3.6000 against 3.6085)."""
    a = study_runs({"hand_layernorm": SEEDS})
    b = _reseed(study_runs({"torch_layernorm": np.array([3.579, 3.597, 3.559, 3.70])}, seeds=4), [0, 1, 2, 7])
    analysis = _analysis(pd.concat([a, b], ignore_index=True))
    table = analysis.table.set_index("variant").test_loss
    assert table["hand_layernorm"] < table["torch_layernorm"]  # the unpaired means disagree with the pairs
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    assert r.verdict == PairWord.DIFFERENT and r.primary.n == 3
    gap, text = _gap_text(r, "torch_layernorm")
    loss = loss_line(analysis)
    assert loss.startswith("Loss: lowest test loss torch_layernorm 3.5783 (the 3 seeds every variant here finished)"), loss
    assert f"then hand_layernorm {text} (paired over 3 seeds)" in loss, loss
    assert r.decision.low <= -gap <= r.decision.high and gap > 0  # the gap sits inside its own interval
    real = real_line(analysis)
    assert "paired by seed:" not in real and "paired on the seeds both finished (n = 3)" in real, real


def test_a_failed_seed_leaves_the_gap_inside_its_own_interval() -> None:
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.0008 + np.array([0.0004, -0.0004, 0.0002, 0.0, -0.0002])})
    runs.loc[(runs.variant == "torch_layernorm") & (runs.seed == 2), ["outcome", "test_loss"]] = ["failed", math.nan]
    analysis = _analysis(runs)
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    gap, text = _gap_text(r, "hand_layernorm")
    assert r.decision.low <= gap <= r.decision.high and r.decision.level == pytest.approx(0.9)  # TOST's interval: the one that decided it
    loss = loss_line(analysis)
    assert f"torch_layernorm {text} (paired over 4 seeds)" in loss and "+0.0007 [+0.0003, +0.0012] (90% interval)" in loss, loss
    assert "over up to 5 seeds, paired on the seeds both finished (n = 4)" in real_line(analysis)


def test_seed_sets_that_share_none_are_said_unpaired() -> None:
    a = study_runs({"hand_layernorm": SEEDS})
    b = _reseed(study_runs({"torch_layernorm": SEEDS - 0.03}), [5, 6, 7, 8, 9])
    analysis = _analysis(pd.concat([a, b], ignore_index=True))
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    assert r.primary.test == "welch"
    loss, real = loss_line(analysis), real_line(analysis)
    assert "no seed finished by every variant" in loss and "unpaired (Welch: seed sets differ), n = 5 vs 5" in loss, loss
    assert "paired" not in real.replace("unpaired", ""), real
    assert "1 pair(s) unpaired (Welch: seed sets differ)" in real


def _lr_sweep() -> pd.DataFrame:
    frames = []
    for i, lr in enumerate((0.001, 0.01)):
        runs = study_runs({v: SEEDS[:3] + 0.001 * j + 0.05 * i + np.array([0.0, 0.0002 * j, -0.0001 * j]) for j, v in enumerate(TABLE)}, seeds=3)
        runs = runs.assign(**{"axis.norm": runs.norm, "axis.optim.lr": str(lr), "lr": lr, "lr_variant": runs.variant})
        frames.append(runs.assign(variant=runs.variant + f" · lr={lr}", run_id=runs.run_id + f"-{lr}"))
    return pd.concat(frames, ignore_index=True)


def test_a_learning_rate_sweep_is_read_per_setting_never_pooled() -> None:
    analysis = _analysis(_lr_sweep())
    assert [s.label for s in settings_of(analysis.runs)] == ["lr=0.001", "lr=0.01"]
    loss = loss_line(analysis)
    # Every pair within a setting equivalent, and torch_rmsnorm against hand_layernorm not a compared pair: no lowest.
    assert loss.startswith("Loss, per setting (the settings are not pooled): at lr=0.001: lowest test loss undecided: hand_layernorm 3.6000"), loss
    assert "; at lr=0.01: lowest test loss undecided: hand_layernorm 3.6500" in loss and "· lr=" not in loss
    assert "torch_rmsnorm +0.0031 (not a compared pair: no interval)" in loss, loss
    within = [r for r in analysis.comparisons if r.metric == "test_loss" and not r.axis.endswith("lr")]
    across = [r for r in analysis.comparisons if r.metric == "test_loss" and r.axis.endswith("lr")]
    assert len(across) == 5 and len(within) == 16
    real = real_line(analysis)
    assert f"of {len(within)} pair(s)" in real and f"{len(across)} pair(s) across settings are in the pair lines" in real, real


def test_a_diverged_variant_is_named_in_the_loss_line() -> None:
    """`norm=torch_layernorm,no_norm optim.lr=50`: no_norm diverged at step 4, torch_layernorm's loss exploded."""
    runs = made_up_runs({"torch_layernorm": "torch_layernorm", "no_norm": "no_norm"}, seeds=1, device="cpu", lr=50.0)
    runs.loc[runs.variant == "torch_layernorm", "test_loss"] = 182919.75
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done", "test_loss"]] = ["diverged", 4.0, 4.0, math.nan]
    assert loss_line(_analysis(runs)) == "Loss: torch_layernorm 182919.7500, the only variant that finished; no_norm diverged (1/1 runs, step 4)."


def test_a_tie_is_the_verdicts_never_the_rounding() -> None:
    """Equal to 4 decimals, and a real (tiny) difference on every seed: the pair's word says so."""
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.00004 + np.array([1, -1, 0.5, 0, -0.5]) * 1e-6})
    analysis = _analysis(runs)
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    loss = loss_line(analysis)
    assert "tied" not in loss and f"torch_layernorm {_gap_text(r, 'hand_layernorm')[1]}" in loss, loss
    assert verdict_text(r) == "equivalent within ±0.01, a difference remains"


def test_one_seed_each_says_no_interval_once_and_no_lowest() -> None:
    """One run each tests nothing: the lower mean is printed, never called the lowest."""
    runs = study_runs({"hand_layernorm": SEEDS[:1], "torch_layernorm": SEEDS[:1] - 0.02}, seeds=1)
    lines = headline(_analysis(runs))
    assert lines[1] == ("Loss: lowest test loss undecided: torch_layernorm 3.5800 (the one seed every variant here finished); "
                        "against it hand_layernorm +0.0200 (one run each: no interval).")  # fmt: skip
    assert lines[2].startswith("Is it real? One seed per variant: "), lines[2]


# --- "lowest" only where the pairs establish it (issue 62, items 3 and 12) ---------------------------


def _lowest_is_established(a: Analysis) -> None:
    """The rule every Loss line keeps: a variant called lowest has each of its pairs with the others in
    the line judged lower at the family's level (its direction shown), or said tied beside it; none
    of its pairs shows another variant lower."""
    loss = loss_line(a)
    for named in re.findall(r"lowest test loss (?!undecided)(\S+) ", loss):
        for r in a.comparisons:
            if r.metric == "test_loss" and named in (r.a, r.b) and r.decision is not None and r.decision.sign:
                lower = r.a if r.decision.sign > 0 else r.b
                assert lower == named, f"{loss}\n{r.pair}: {lower} shown lower"
        others = [v for v in a.runs.variant.unique() if v != named and f" {v} " in loss]
        for v in others:
            r = _pair(a, named, v)
            assert r.decision is not None and (r.decision.sign or r.decision.inside), f"{loss}\n{r.pair}: {r.verdict}"
            if not r.decision.sign:
                assert f"tied with {v}" in loss or re.search(rf"tied with [^;]*\b{v}\b", loss), loss


def test_uneven_seeds_where_the_shared_seed_and_welch_disagree_name_no_contradicted_lowest() -> None:
    """hand_layernorm on seeds 0-4, torch_layernorm on 0 and 5-8: on the one seed both finished hand_layernorm
    is lower (3.60 against 3.61), over all seeds Welch shows torch_layernorm lower. The old line called
    hand_layernorm lowest on seed 0 and then printed torch_layernorm's negative, *different* gap beside it."""
    a = study_runs({"hand_layernorm": SEEDS})
    b = _reseed(study_runs({"torch_layernorm": np.array([3.61, 3.53, 3.53, 3.54, 3.53])}), [0, 5, 6, 7, 8])
    analysis = _analysis(pd.concat([a, b], ignore_index=True))
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    assert r.primary.test == "welch" and r.verdict == PairWord.DIFFERENT and r.decision.sign < 0  # torch_layernorm lower
    loss = loss_line(analysis)
    gap, text = _gap_text(r, "torch_layernorm")
    assert loss.startswith("Loss: lowest test loss torch_layernorm 3.5480 (over its 5 finished seeds: only one seed finished by every variant)"), loss
    assert f"then hand_layernorm {text} (unpaired (Welch: seed sets differ), n = 5 vs 5)" in loss, loss
    assert "lowest test loss hand_layernorm" not in loss and "-0." not in loss.split("then")[1]  # no gap contradicts the lowest
    assert r.decision.low <= -gap <= r.decision.high and gap > 0
    _lowest_is_established(analysis)


def test_three_runs_two_diverged_are_counted_never_one_run_each() -> None:
    """no_norm ran seeds 0-2 and diverged on two; the LayerNorms finished all three: no "one run each" anywhere."""
    runs = study_runs({"hand_layernorm": SEEDS[:3], "torch_layernorm": SEEDS[:3] + 0.0002 + NOISE[:3], "no_norm": SEEDS[:3] + 0.05}, seeds=3)
    runs.loc[(runs.variant == "no_norm") & (runs.seed > 0), ["outcome", "stopped_at_step", "test_loss"]] = ["diverged", 40.0, math.nan]
    analysis = _analysis(runs)
    lines = headline(analysis)
    assert not any("one run each" in line for line in lines), lines
    loss = lines[1]
    assert ("no_norm +0.0500 (no interval: 1 seed(s) with both variants finished; needs ≥2 (hand_layernorm 3 runs, all finished; "
            "no_norm 3 runs: 1 finished, 2 diverged))") in loss, loss  # fmt: skip
    assert loss.startswith("Loss: lowest test loss undecided: hand_layernorm") and "no_norm diverged (2/3 runs, step 40)" in loss, loss
    assert lines[2].startswith("Is it real? Test loss over 3 seeds"), lines[2]
    _lowest_is_established(analysis)


def test_one_finished_seed_of_several_runs_is_not_one_seed_per_variant() -> None:
    """Each variant ran three seeds and two of each diverged: at most one finished seed, said with its runs."""
    runs = study_runs({"hand_layernorm": SEEDS[:3], "torch_layernorm": SEEDS[:3] + 0.01}, seeds=3)
    runs.loc[runs.seed > 0, ["outcome", "stopped_at_step", "test_loss"]] = ["diverged", 40.0, math.nan]
    lines = headline(_analysis(runs))
    assert lines[2].startswith("Is it real? At most one finished seed per variant (hand_layernorm 3 runs: 1 finished, 2 diverged; "
                               "torch_layernorm 3 runs: 1 finished, 2 diverged): "), lines[2]  # fmt: skip
    assert "one run each" not in lines[1] and "lowest test loss undecided" in lines[1], lines[1]


@pytest.mark.parametrize("seeds", [3, 5])
def test_three_bit_identical_implementations_are_a_tie_never_a_lowest(seeds: int) -> None:
    """hand_rmsnorm, torch_rmsnorm and fast_rmsnorm give the same loss on every seed: the old line read
    "lowest test loss fast_rmsnorm … hand_rmsnorm +0.0000, torch_rmsnorm +0.0000" (idxmin picks the first).
    Three seeds: the pairs cannot decide (no spread, 3 equal signs); five: equivalent by 5 equal signs."""
    same = SEEDS[:seeds]
    analysis = _analysis(study_runs({"hand_rmsnorm": same, "torch_rmsnorm": same, "fast_rmsnorm": same}, seeds=seeds))
    loss = loss_line(analysis)
    assert "lowest" not in loss, loss
    why = "identical to 4 decimals" if seeds == 3 else "equivalent within ±0.01 or identical to 4 decimals"
    assert loss.startswith(f"Loss: test loss tied: fast_rmsnorm, hand_rmsnorm, torch_rmsnorm ({why}); fast_rmsnorm {same.mean():.4f} "), loss
    assert "hand_rmsnorm +0.0000 (every seed alike: no interval)" in loss and "torch_rmsnorm +0.0000 (not a compared pair: no interval)" in loss, loss


def test_near_identical_within_the_margin_are_tied_with_their_interval() -> None:
    """A gap of 0.0001 nats, noisy both ways: equivalent within ±0.01, no direction shown: a tie, its interval beside it."""
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.0001 + np.array([3, -3, 2, -2, 0]) * 1e-4})
    analysis = _analysis(runs)
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    assert r.verdict == PairWord.EQUIVALENT and not r.decision.sign
    gap, text = _gap_text(r, "hand_layernorm")
    loss = loss_line(analysis)
    assert loss == (f"Loss: test loss tied: hand_layernorm, torch_layernorm (equivalent within ±0.01); hand_layernorm 3.6000 "
                    f"(the 5 seeds every variant here finished); against it torch_layernorm {text} (paired over 5 seeds)."), loss  # fmt: skip
    assert "(90% interval)" in text and r.decision.low <= gap <= r.decision.high


def test_the_lowest_tied_with_one_and_below_the_other() -> None:
    """torch_layernorm below torch_rmsnorm (different) and equivalent to hand_layernorm with no direction:
    the lowest, tied with hand_layernorm; hand_layernorm against torch_rmsnorm is not claimed."""
    runs = study_runs({"torch_layernorm": SEEDS, "hand_layernorm": SEEDS + 0.0001 + np.array([3, -3, 2, -2, 0]) * 1e-4,
                        "torch_rmsnorm": SEEDS + 0.03 + NOISE})  # fmt: skip
    analysis = _analysis(runs)
    loss = loss_line(analysis)
    assert loss.startswith("Loss: lowest test loss torch_layernorm 3.6000 (the 5 seeds every variant here finished), tied with "
                           "hand_layernorm (equivalent within ±0.01); then hand_layernorm +0.0001 ["), loss  # fmt: skip
    assert "torch_rmsnorm +0.0300 [" in loss and "(95% interval) different" in loss and loss.endswith("different (paired over 5 seeds)."), loss
    _lowest_is_established(analysis)


def test_a_difference_shown_is_never_printed_as_zero() -> None:
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.00004 + np.array([1, -1, 0.5, 0, -0.5]) * 1e-6})
    loss = loss_line(_analysis(runs))
    assert "torch_layernorm +0.000040 [+0.000039, +0.000041] (90% interval)" in loss and "+0.0000 " not in loss, loss


def _analysis_and_pairs(runs: pd.DataFrame) -> tuple[Analysis, list[Result]]:
    results = compare(runs, Margins())
    return Analysis("pairs", "sqlite://", "0", runs, pd.DataFrame(), summarize(runs), results, Margins(), 0), results


def _labelled(line: str) -> bool:
    """Every interval in the line says its level: each `[...]` is followed by `(NN% interval)`."""
    return line.count("[") == len(re.findall(r"\] \(\d+(?:\.\d+)?% interval\)", line))


def test_the_family_printed_is_the_one_holm_adjusted_over() -> None:
    """Two bit-identical implementations (every difference exactly 0: no p-value) beside two pairs
    that have one: Holm adjusts over those, and the heading says how many of how many."""
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS, "hand_rmsnorm": SEEDS + 0.002 + jitter(1),
                        "torch_rmsnorm": SEEDS + 0.004 + jitter(3)})  # fmt: skip
    a, results = _analysis_and_pairs(runs)
    adjusted = sum(math.isfinite(r.p_holm) for r in results)
    assert family_of(results) == adjusted == len(results) - 1 and {r.family for r in results} == {adjusted}
    assert f"Holm-adjusted over the {adjusted} of {len(results)} comparisons with a p-value" in heading(a)
    # Every pair with a p-value: the count alone, as before.
    full, results = _analysis_and_pairs(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.003 + jitter(2)}))
    assert len(results) == 1 and "Holm-adjusted over 1 comparison;" in heading(full)


def test_a_spread_below_the_values_resolution_is_no_spread() -> None:
    """Every seed moved by -0.0234 give or take 1e-12 (float32 resolves 4e-7 at a loss of 3.6): no
    interval [x, x] read as *different*, but no spread, with the sign-flip test's 1/16."""
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0234 + Z * 1e-12})
    (pair,) = compare(runs, Margins())
    assert not pair.decision.spread and pair.primary.se == 0 and pair.primary.p_value == pytest.approx(1 / 16)
    assert pair.verdict == PairWord.INCONCLUSIVE
    (line,) = sentences([pair])
    assert "every one of 5 seeds moved by -0.0234 (to floating-point rounding): no spread, so no interval" in line, line
    assert "CI [" not in line and "different" not in line
    # The same spread in the other intervals that share the rule: Welch's and the trimmed mean's.
    assert welch(np.full(3, 3.6) + Z[:3] * 1e-12, np.full(3, 3.5) + Z[2:] * 1e-12).se == 0
    assert trimmed_mean_interval(0.02 + Z * 1e-13).se == 0
    # Just above the resolution a spread is a spread.
    assert paired_t(SEEDS, SEEDS - 0.0234 + Z * 10 * RESOLUTION * 3.62).se > 0


def test_no_p_prints_as_0() -> None:
    """Twelve seeds: a spread below resolution reads as twelve equal signs (p = 2/2¹²), one just above
    it as a t far out in its tail, and a p that underflows prints as below the floor, never as 0."""
    seeds = np.linspace(3.55, 3.66, 12)
    noise = np.resize(Z, 12)
    for spread in (1e-9, 2e-6):
        runs = study_runs({"hand_layernorm": seeds, "torch_layernorm": seeds - 0.02 + noise * spread}, seeds=12)
        (pair,) = compare(runs, Margins())
        assert pair.verdict == PairWord.DIFFERENT and pair.p_holm > 0
        (line,) = sentences([pair])
        assert not re.search(r"p = 0(\.0*)?[^.\d]", line) and _labelled(line), line
    assert "difference p = 0.00049" in sentences(compare(study_runs({"hand_layernorm": seeds, "torch_layernorm": seeds - 0.02 + noise * 1e-9}, seeds=12),
                                                          Margins()))[0]  # fmt: skip
    assert p_text(0.0) == p_text(5e-320) == "p < 1e-300" and p_text(3.1e-07, "TOST p") == "TOST p = 3.1e-07"


def test_every_interval_says_its_level_and_inconclusive_carries_the_holm_p_that_decided_it() -> None:
    """Three pairs, each about +0.012 with a 95% interval that excludes zero (p ≈ 0.03): Holm over the
    three leaves them *inconclusive*, and each line prints that Holm p beside its 95% interval."""
    spread = 0.0081
    hand_ln = SEEDS
    torch_ln = hand_ln + 0.012 + Z * spread
    hand_rms = hand_ln + 0.012 + np.roll(Z, 2) * spread
    runs = study_runs({"hand_layernorm": hand_ln, "torch_layernorm": torch_ln, "hand_rmsnorm": hand_rms,
                        "torch_rmsnorm": torch_ln + 0.0121 + np.roll(Z, 4) * spread})  # fmt: skip
    results = compare(runs, Margins())
    undecided = [r for r in results if r.verdict == PairWord.INCONCLUSIVE and r.primary.excludes_zero]
    assert undecided, [(r.pair, r.verdict, r.primary.low, r.p_holm) for r in results]
    for r in undecided:
        (line,) = sentences([r])
        assert f"[{r.decision.low:+.4f}, {r.decision.high:+.4f}] (95% interval), Holm p = {r.p_holm:.2g}" in line and r.p_holm >= 0.05, line
    # Every line of this sweep and of one with an equivalence (TOST's 90%) and a difference says its levels.
    small = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0052 + jitter(1), "hand_rmsnorm": SEEDS + 0.03 + jitter(3)})
    lines = sentences(results) + sentences(compare(small, Margins()))
    assert any("(90% interval)" in line for line in lines) and any("different (Δ" in line for line in lines)
    assert all(_labelled(line) for line in lines), lines


def test_comparisons_csv_words_carry_no_interval_and_the_interval_they_were_read_from_is_beside_them() -> None:
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0052 + jitter(1), "hand_rmsnorm": SEEDS + 0.03 + jitter(3)})
    frame = to_frame(compare(runs, Margins()))
    assert not frame.verdict.str.contains(r"\[").any()
    primary = frame[frame.test == "paired_t"]
    assert set(primary.verdict_level.round(6)) <= {0.9, 0.95} and (primary.verdict_low <= primary["diff"]).all()
    assert (primary["diff"] <= primary.verdict_high).all()


def test_the_schema_owns_the_margins() -> None:
    assert [f.name for f in fields(Margins)] == [f.name for f in fields(MarginSchema)]
    assert Margins() == Margins(**{f.name: getattr(MarginSchema(), f.name) for f in fields(MarginSchema)})
