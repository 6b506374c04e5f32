"""The report's "Against the published study" section: the study's claims, each with this sweep's
figure and one word (reproduced, not reproduced, untestable here) and the reason.

Fast tests judge claims from numbers (a GPU sweep included, which this machine cannot run); the slow
ones read the section from real tiny sweeps: the session's `tiny_sweep` (two seeds, no_norm diverging
at another learning rate) and a one-seed sweep of RMSNorm x QK-norm without no_norm. The one-seed
five-norm sweep is checked in test_train.py and the placement sweep in test_variants.py, where those
sweeps are made.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import EXPERIMENT, TinySweep, run_sweep
from mlflow.tracking import MlflowClient
from study_runs import (
    NOISE,
    SEEDS,
    STUDY_SETTING,
    claims_of,
    jitter,
    judged_section,
    made_up_runs,
    section_text,
    speed_check,
    study_runs,
    study_section,
)

from src.core import paths
from src.report.analysis import analyze
from src.report.figures.claims import plot_claims
from src.report.files import claim_tags, claims_frame
from src.report.judge.pairs import Margins, compare
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.study import Reach, StudySection
from src.report.read.claims import FP16, LOSS, SPEED, STABILITY
from src.report.read.published import CLAIMS, SETTING, STUDY, TABLE
from src.report.read.table import summarize
from src.report.words.study import (
    OWN_READING,
    claim_line,
    claim_reason,
    open_question,
    part_reason,
    written,
)
from src.stats.verdicts import (
    ClaimWord,
    Direction,
    Equivalence,
    Size,
    claim_word,
    judge_difference,
    judge_equivalence,
    read,
)
from src.tracking.sweep import SWEEP_TAG
from src.tracking.variants import Axis

HEADING = STUDY.heading  # the study's section: "Against <its title>"

# --- the study as data ------------------------------------------------------------------------------


def test_the_claims_quote_the_studys_table_and_the_preset_is_its_setting() -> None:
    claims = {c.number: c for c in CLAIMS}
    assert sorted(claims) == [1, 2, 3, 4, 5, 6, 7, 8]  # the eighth: a trend over model sizes (tests/test_claims_file.py)
    ln, rms = claims[1].parts
    assert ln.published(SPEED) == pytest.approx(8324 / 9358 - 1) and round(ln.published(SPEED), 3) == -0.110
    assert round(rms.published(SPEED), 3) == -0.093
    assert rms.band(SPEED) == (-0.115, rms.published(SPEED))  # "~10–11%" joined with its own -9.25%
    assert round(claims[2].parts[0].published(SPEED), 3) == -0.024  # hand-rolled RMSNorm ~2.5% faster
    built_ins, shrank = claims[3].parts
    assert abs(built_ins.published(SPEED)) < 0.005 and built_ins.kind.sign(built_ins, SPEED) == 0  # the built-ins within ~0.5%
    assert shrank.published(SPEED) == pytest.approx((8289 / 8324 - 1) - (9134 / 9358 - 1)) and shrank.kind.sign(shrank, SPEED) == 1
    assert [round(p.published(LOSS), 4) for p in claims[4].parts] == [0.006, 0.0012]
    assert [round(p.published(LOSS), 3) for p in claims[5].parts] == [-0.024, -0.029]
    assert claims[6].parts[0].published(STABILITY) == 530
    assert round(claims[7].parts[0].published(SPEED), 3) == -0.089  # the headline: kernels beat the math
    assert paths.preset_norms("gpt2_small_study") == list(TABLE)  # the study's five, swept in its table's order
    preset = paths.compose(["experiment=gpt2_small_study"])
    assert int(preset.optim.token_budget) == SETTING.tokens and preset.precision.name == "fp16_mixed"
    assert (preset.model.norm_placement, preset.model.qk_norm, preset.model.init) == ("pre", False, "study")
    assert preset.precision.name in FP16  # the preset is inside every claim's domain


# --- words from numbers: the readings and the rule (src/stats/verdicts.py) -------------------------------

DIFFERENCE, EQUIVALENCE = judge_difference, judge_equivalence  # each kind's rule
HOLDS, OPPOSITE, UNDECIDED = Direction.HOLDS, Direction.OPPOSITE, Direction.UNDECIDED
CONSISTENT, SMALLER, LARGER = Size.CONSISTENT, Size.SMALLER, Size.LARGER
INSIDE, OUTSIDE = Equivalence.INSIDE, Equivalence.OUTSIDE
REPRODUCED, PARTLY, NOT_REPRODUCED = ClaimWord.REPRODUCED, ClaimWord.PARTLY, ClaimWord.NOT_REPRODUCED
INCONCLUSIVE, NOT_APPLICABLE, NOT_TESTED = ClaimWord.INCONCLUSIVE, ClaimWord.NOT_APPLICABLE, ClaimWord.NOT_TESTED


@pytest.mark.parametrize(
    "interval,sign,band,readings,asserts,word",
    [
        # A difference: the study's -0.024 against this sweep's interval.
        ((-0.030, -0.020), -1, (-0.024, -0.024), (HOLDS, CONSISTENT, OUTSIDE), DIFFERENCE, REPRODUCED),
        ((-0.0055, -0.0049), -1, (-0.024, -0.024), (HOLDS, SMALLER, INSIDE), DIFFERENCE, PARTLY),
        ((-0.060, -0.040), -1, (-0.024, -0.024), (HOLDS, LARGER, OUTSIDE), DIFFERENCE, PARTLY),
        ((0.001, 0.004), -1, (-0.024, -0.024), (OPPOSITE, SMALLER, INSIDE), DIFFERENCE, NOT_REPRODUCED),
        ((-0.004, 0.003), -1, (-0.024, -0.024), (UNDECIDED, SMALLER, INSIDE), DIFFERENCE, NOT_REPRODUCED),
        ((-0.030, 0.003), -1, (-0.024, -0.024), (UNDECIDED, CONSISTENT, UNDECIDED), DIFFERENCE, INCONCLUSIVE),
        # An equivalence within ±0.01, claimed size ±0.0065: a straddling interval decides nothing...
        ((0.004, 0.0105), 0, (-0.0065, 0.0065), (UNDECIDED, CONSISTENT, UNDECIDED), EQUIVALENCE, INCONCLUSIVE),
        # ...unless it lies wholly beyond the claimed size: no seed count brings it back.
        ((0.0073, 0.0105), 0, (-0.0065, 0.0065), (UNDECIDED, LARGER, UNDECIDED), EQUIVALENCE, NOT_REPRODUCED),
        ((-0.002, 0.004), 0, (-0.0065, 0.0065), (UNDECIDED, CONSISTENT, INSIDE), EQUIVALENCE, REPRODUCED),
        ((0.007, 0.009), 0, (-0.0065, 0.0065), (UNDECIDED, LARGER, INSIDE), EQUIVALENCE, PARTLY),
        ((0.011, 0.015), 0, (-0.0065, 0.0065), (UNDECIDED, LARGER, OUTSIDE), EQUIVALENCE, NOT_REPRODUCED),
    ],
)
def test_three_readings_then_one_word(interval, sign, band, readings, asserts, word) -> None:  # noqa: ANN001
    found = read(*interval, sign, band, 0.01)
    assert (found.direction, found.size, found.equivalence) == readings
    assert asserts(found).word == word


@pytest.mark.parametrize(
    "parts,word",
    [
        ([REPRODUCED, REPRODUCED], REPRODUCED),
        ([REPRODUCED, INCONCLUSIVE], PARTLY),  # one part undecided: never reproduced
        ([REPRODUCED, NOT_REPRODUCED], PARTLY),
        ([INCONCLUSIVE, NOT_REPRODUCED], NOT_REPRODUCED),
        ([NOT_APPLICABLE, NOT_APPLICABLE], NOT_APPLICABLE),
        ([NOT_APPLICABLE, INCONCLUSIVE], INCONCLUSIVE),
    ],
)
def test_a_claim_of_several_parts_is_reproduced_only_when_every_part_is(parts: list[str], word: str) -> None:
    assert claim_word(parts) == word


# --- the real compare -> against_study path, on made-up GPU sweeps ------------------------------------------

def test_a_a_consistent_edge_below_the_margin_is_partly_reproduced_never_seed_noise() -> None:
    loss = {"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0052 + NOISE,
            "hand_rmsnorm": SEEDS + 0.001, "torch_rmsnorm": SEEDS + 0.001 - 0.0049 - NOISE}  # fmt: skip
    section = section_text(study_runs(loss))
    claim = next(c for c in section.judged.claims if c.claim.number == 5)
    assert claim.word == PARTLY and {f.word for f in claim.findings} == {PARTLY}
    ln = claim.findings[0]
    assert ln.high < 0 and ln.low > -0.024  # the edge is real, and the study's -0.024 is outside its interval
    assert "the study's direction, by less than its -0.0242 (outside the interval)" in claim_reason(claim)
    text = "\n".join(section.lines())
    assert "seed noise" not in claim_line(claim).split("→")[1] and "settles" not in text
    assert "so the edge is not seed noise alone" in open_question(claim) and "SD 0.0158 nats" in open_question(claim)
    assert "LayerNorm -0.0242 = 1.1" in open_question(claim)  # the study's gap, in this setting's two-run seed spread


def test_b_the_size_the_study_claimed_is_judged() -> None:
    hand_ln = np.full(5, 1000.0) + np.arange(5)
    jitter = 1 + np.array([0.001, -0.001, 0.0005, 0.0, -0.0005])
    # Each variant its own jitter: two built-ins that differ by one exact factor on every seed have no
    # spread (src.stats.inference.alike), and no interval to read a size from.
    speed = {"hand_layernorm": hand_ln, "torch_layernorm": hand_ln * 1.03 * jitter,
             "hand_rmsnorm": hand_ln / (1 - 0.014) * jitter[::-1], "torch_rmsnorm": hand_ln * 1.03 / (1 - 0.014) * np.roll(jitter, 1)}  # fmt: skip
    claims = claims_of(study_runs(speed=speed))
    assert claims[1].word == PARTLY and "by less than its -11.0%" in claim_reason(claims[1])  # +3% tokens/s: -2.9% time
    assert claims[2].word == PARTLY and "by less than its -2.4%" in claim_reason(claims[2])
    built_ins = claims[3].findings[0]
    assert built_ins.word == PARTLY and part_reason(built_ins) == (
        "equivalent within ±2% (a difference of -1.4% [-1.8%, -1.0%] (99.5% interval) remains), but further apart than the study's ±0.55% "
        "(this sweep trained on 1 process, the study on 8, whose all-reduce is part of its step time and shrinks a norm's share of it)"
    )  # a small, real effect: equivalent, and said to remain
    assert claims[3].findings[1].word == NOT_REPRODUCED  # the hand-rolled gap did not shrink: both -1.4%
    assert claims[7].word == PARTLY  # built-in LayerNorm beats hand-rolled RMSNorm, by far less than -8.9%
    # The study's own -2.4% inside the interval: reproduced.
    speed["hand_rmsnorm"] = hand_ln / (1 - 0.024) * jitter[::-1]
    assert claims_of(study_runs(speed=speed))[2].word == REPRODUCED


def test_c_an_interval_straddling_the_margin_is_inconclusive_unless_beyond_the_claimed_size() -> None:
    diffs = np.array([0.0089, 0.0075, 0.0103, 0.0089, 0.0089])  # +0.0089 [+0.0073, +0.0105] at 95%
    claims = claims_of(study_runs({"hand_layernorm": SEEDS, "hand_rmsnorm": SEEDS + diffs}))
    hand = claims[4].findings[0]
    assert (hand.word, hand.readings.equivalence) == (NOT_REPRODUCED, UNDECIDED) and 0.0065 < hand.low < 0.01 < hand.high
    assert part_reason(hand) == "the whole interval lies beyond the study's ±0.0065: no seed count makes them that close"
    wider = np.array([0.0089, 0.0035, 0.0143, 0.0089, 0.0089])  # the same estimate, an interval that holds 0.0065
    claims = claims_of(study_runs({"hand_layernorm": SEEDS, "hand_rmsnorm": SEEDS + wider}))
    assert claims[4].word == INCONCLUSIVE and "the interval straddles the margin (±0.01 nats) and overlaps the study's ±0.0065: about" in claim_reason(claims[4])


def test_d_one_part_decided_does_not_decide_for_all() -> None:
    loss = {"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE,
            "hand_rmsnorm": SEEDS, "torch_rmsnorm": SEEDS - 0.01 + np.array([0.02, -0.03, 0.01, 0.0, -0.01])}  # fmt: skip
    claims = claims_of(study_runs(loss))
    assert [f.word for f in claims[5].findings] == [REPRODUCED, INCONCLUSIVE]
    assert claims[5].word == PARTLY
    # An unswept part is not a reproduced one either.
    alone = claims_of(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.025 + NOISE}))
    assert alone[5].word == PARTLY and claim_reason(alone[5]).endswith("RMSNorm not swept")


def test_e_divergence_counts_only_where_the_normalized_variants_trained() -> None:
    runs = study_runs({v: SEEDS for v in TABLE})
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 540.0, 540.0]
    assert claims_of(runs)[6].word == REPRODUCED
    runs[["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 40.0, 40.0]  # all five diverged at step 40
    claim = claims_of(runs)[6]
    assert claim.word == NOT_APPLICABLE and claim_reason(claim) == (
        "no_norm diverged in 5/5 runs (step 40 each), the normalized variants in 20/20 (step 40 each): as often, so the "
        "divergence is not the missing norm's"
    )
    fine = runs.copy()
    fine.loc[fine.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["finished", math.nan, 33_165.0]
    assert claims_of(fine)[6].word == NOT_REPRODUCED
    # experiment=no_norm_collapse on a CPU: no_norm diverges alone, but in fp32 on a small model.
    collapse = made_up_runs({v: v for v in TABLE}, device="cpu", precision="fp32 (matmul precision highest)", n_params=1.4e7)
    collapse.loc[collapse.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 23.0, 23.0]
    claim = claims_of(collapse)[6]
    # The setting's facts by name (the section says them once in full), and the sweep's own reading set apart.
    assert claim.word == NOT_APPLICABLE and claim_reason(claim) == (
        f"outside its domain: 14,000,000 parameters, precision fp32 ({OWN_READING}: reproduced: no_norm diverged in 3/3 runs "
        "(step 23 each), the normalized variants in 0/12: more often than chance allows (Fisher's exact p = 0.0022))"
    )


def test_f_unrelated_variants_do_not_change_a_claims_word() -> None:
    hand_ln = np.full(5, 1000.0) + np.arange(5)
    jitter = 1 + np.array([0.004, -0.006, 0.002, 0.005, -0.005])
    speed = {"hand_layernorm": hand_ln, "hand_rmsnorm": hand_ln / (1 - 0.024) * jitter}
    alone = claims_of(study_runs(speed=speed))
    others = {v: hand_ln * (1 + 0.01 * i) for i, v in enumerate(["dyt", "scalenorm", "fast_rmsnorm", "layernorm_noaffine", "fast_dyt"])}
    crowded = claims_of(study_runs(speed={**speed, **others}))
    assert alone[2].word == crowded[2].word and claim_line(alone[2]) == claim_line(crowded[2])


def test_a_sequential_sweep_takes_its_claims_direction_from_its_own_decisions() -> None:
    loss = {"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE}
    runs = study_runs(loss)
    undecided = SequentialVerdict("torch_layernorm vs hand_layernorm", "test_loss", "undecided", None, 5, 0.01, 0.02)
    claim = claims_of(runs, sequential=(undecided,))[5]
    assert claim.findings[0].word == INCONCLUSIVE and "the sequential sweep's decision, undecided open when the sweep stopped" in claim_reason(claim)
    different = SequentialVerdict("torch_layernorm vs hand_layernorm", "test_loss", "different", 2, 4, 0.02, math.nan)
    assert claims_of(runs, sequential=(different,))[5].findings[0].word == REPRODUCED


def test_outside_the_claims_domain_is_not_applicable_and_still_shows_the_figure() -> None:
    five = {v: v for v in TABLE}
    check = speed_check({"hand_layernorm": 14.0, "torch_layernorm": 4.0, "hand_rmsnorm": 12.0, "torch_rmsnorm": 4.0, "no_norm": 0.0})
    gpu = claims_of(made_up_runs(five, **STUDY_SETTING), check)
    assert gpu[1].word == PARTLY and "speed check, 30 kernel rounds" in claim_line(gpu[1])  # -10%: smaller than -11%, LN
    assert gpu[2].word == PARTLY  # -2% against -2.4%
    cpu = claims_of(made_up_runs(five, device="cpu"), check)
    assert {cpu[n].word for n in (1, 2, 3, 7)} == {NOT_APPLICABLE}
    assert cpu[1].findings[0].outside == (
        "CPU run: the study's figure comes from its CUDA kernels",
        "precision bf16, not the study's 16-bit autocast",
    )
    # What the sweep shows instead: its figure with its interval, and what it reads at its own setting.
    assert "LayerNorm -10.0% [" in claim_line(cpu[1]) and f"({OWN_READING}: LayerNorm reproduced; RMSNorm partly reproduced)" in claim_reason(cpu[1])
    assert claim_line(cpu[1]).startswith(f"1. {NOT_APPLICABLE} — built-in kernels")  # the word first
    # The model axes: a post-norm variant is not the study's model.
    post = claims_of(made_up_runs({"torch_layernorm": "torch_layernorm", "torch_rmsnorm": "torch_rmsnorm"}, **{"model.norm_placement": "post"}))
    assert sorted(post) == [3, 4] and {c.word for c in post.values()} == {NOT_APPLICABLE}
    assert "not the study's setting: torch_layernorm has model.norm_placement=post (the study model.norm_placement=pre)" in claim_reason(post[4])


def test_one_seed_says_which_applies_first() -> None:
    runs = study_runs({"hand_layernorm": SEEDS[:1], "torch_layernorm": SEEDS[:1] - 0.02}, seeds=1)
    claims = claims_of(runs)
    assert claims[5].word == INCONCLUSIVE and claim_reason(claims[5]).startswith("LayerNorm: one seed gives no interval")
    assert "one seed per variant shows no seed spread here" in open_question(claims[5])
    small = claims_of(made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, seeds=1, device="cpu"))
    assert small[5].word == NOT_APPLICABLE and f"{OWN_READING}: LayerNorm inconclusive: one seed gives no interval)" in claim_reason(small[5])
    assert claim_reason(small[5]).startswith("outside its domain: CPU run")  # the domain first


def test_the_studys_table_sits_beside_the_sweeps_and_the_plot_draws_each_part() -> None:
    loss = {v: SEEDS + 0.001 * i + jitter(i) for i, v in enumerate(TABLE)}  # each variant with its own seed noise
    runs = study_runs(loss)
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step"]] = ["diverged", 530.0]
    section = section_text(runs)
    headers, rows = section.table
    assert headers[:4] == ["variant", "seeds (study / sweep)", "training time s (study)", "training time s (sweep)"]
    assert rows[0][:3] == ["hand_layernorm", "1 / 5", "9,358"] and rows[0][6] == "3.5953"
    assert rows[-1][0] == "no_norm" and rows[-1][6] == "NaN by step 530" and rows[-1][7].startswith("diverged")
    lines = section.lines()
    assert any(line.startswith("variant ") and "test loss (study)" in line for line in lines)
    assert section.method.startswith(
        "Each interval below is simultaneous over the section's 10 claim part(s) with one and claim 6's Fisher exact test "
        "(Bonferroni: each at 99.55%)"
    )
    fig = plot_claims(section.judged)
    assert fig is not None and [len(ax.get_yticks()) for ax in fig.axes] == [6, 4]  # speed parts, loss parts
    frame = claims_frame(section.judged)  # claims.csv: the plot's numbers, a row per part
    assert len(frame) == 11 and set(frame.confidence.dropna()) == {1 - 0.05 / 11}
    assert frame[frame.claim == 6].confidence.isna().all()  # an event: no interval, no confidence
    ln = frame[(frame.claim == 5) & (frame.part == "LayerNorm")].iloc[0]
    assert (ln.study, ln.direction, ln.part_word) == (pytest.approx(3.571158 - 3.595336), "opposite", NOT_REPRODUCED)
    assert ln.ci_low <= ln.estimate <= ln.ci_high
    assert plot_claims(judged_section(made_up_runs({"dyt": "dyt"}))) is None


def test_a_sweep_without_the_studys_variants_gets_one_line() -> None:
    section = study_section(made_up_runs({"dyt": "dyt", "scalenorm": "scalenorm"}), (), {}, Margins())
    assert section.lines() == [f"{HEADING}: this sweep ran none of the study's variants "
                               "(hand_layernorm, torch_layernorm, hand_rmsnorm, torch_rmsnorm, no_norm); nothing to compare."]  # fmt: skip
    assert claim_tags(section.judged) == {}



# --- issue 62: one domain rule, runs set aside named, untested apart from outside, seeds beyond those run,
# --- a time that is no measurement read for nothing -----------------------------------------------------

PRECISION_AXIS = (Axis("precision", ("precision.name",)),)
SPEEDS = {"hand_layernorm": 1000.0, "torch_layernorm": 1120.0, "hand_rmsnorm": 1025.0, "torch_rmsnorm": 1125.0}


def _at(precision: str, swept: bool) -> pd.DataFrame:
    """The study's setting in one precision: its five variants, 5 seeds, each with its own jitter (no_norm trains through)."""
    runs = study_runs(loss={v: SEEDS + jitter(i) for i, v in enumerate(TABLE)},
                       speed={v: t * (1 + jitter(i)) for i, (v, t) in enumerate(SPEEDS.items())})  # fmt: skip
    runs = runs.assign(precision=f"{precision} (matmul precision high)")
    if not swept:
        return runs
    return runs.assign(**{"axis.precision": precision}, variant=runs.variant + f" · {precision}", run_id=runs.run_id + precision)


def test_a_precision_is_judged_by_one_domain_rule_whether_swept_or_not() -> None:
    """Issue 62, 7: bf16 runs read the same when precision is swept beside fp32 as when it is not swept:
    16-bit autocast is the speed and kernel-loss claims' domain, fp16 alone claim 6's."""
    alone = claims_of(_at("bf16_mixed", swept=False))
    swept = claims_of(pd.concat([_at("fp32", True), _at("bf16_mixed", True)], ignore_index=True), axes=PRECISION_AXIS)
    for n in (1, 2, 3, 5, 7):
        assert alone[n].word == swept[n].word != NOT_APPLICABLE, (n, claim_reason(swept[n]))
        assert claim_reason(alone[n]) == claim_reason(swept[n]) and "not the study's setting" not in claim_reason(swept[n])
        assert all(v.endswith(" · bf16_mixed") for f in swept[n].findings for v in f.variants)  # the domain's, not the first
    # Claim 6's domain is fp16 alone: bf16 (and fp32) leave it by the precision fact, never as "not the study's setting".
    for claim in (alone[6], swept[6]):
        assert claim.word == NOT_APPLICABLE and claim.outside[0].fact.startswith("precision ") and "not the study's setting" not in claim_reason(claim)
    # Where the study's own precision ran beside bf16, the claims read it, and bf16 is set aside, with why.
    both = section_text(pd.concat([_at("fp16_mixed", True), _at("bf16_mixed", True)], ignore_index=True), axes=PRECISION_AXIS)
    assert {v for c in both.judged.claims for f in c.findings for v in f.variants} <= {f"{v} · fp16_mixed" for v in TABLE}
    assert {s.variant for s in both.judged.set_aside} == {f"{v} · bf16_mixed" for v in TABLE}
    assert both.setting[-1].startswith("set aside, read by no claim: hand_layernorm · bf16_mixed, ") and (
        "(25 runs): precision=bf16_mixed (the study precision=fp16_mixed)" in both.setting[-1])


def test_an_init_sweeps_setting_names_the_runs_read_and_those_set_aside() -> None:
    """Issue 62, 8: `model.init=study,gpt2`: every claim reads the study-init runs; the setting lines
    are theirs, and the gpt2 runs are named as set aside, with why."""
    frames = []
    for init in ("study", "gpt2"):
        runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE})
        frames.append(runs.assign(**{"model.init": init, "axis.model.init": init}, variant=runs.variant + f" · init={init}",
                                  run_id=runs.run_id + init))  # fmt: skip
    text = section_text(pd.concat(frames, ignore_index=True), axes=(Axis("model.init", ("model.init",)),))
    judged = text.judged
    assert {v for c in judged.claims for f in c.findings for v in f.variants} == {"hand_layernorm · init=study", "torch_layernorm · init=study"}
    assert judged.read == ("hand_layernorm · init=study", "torch_layernorm · init=study")
    assert [(s.variant, s.runs, s.why) for s in judged.set_aside] == [
        (f"{v} · init=gpt2", 5, ((f"{v} · init=gpt2", "model.init", "gpt2", "study"),)) for v in ("hand_layernorm", "torch_layernorm")]  # fmt: skip
    code = next(line for line in text.setting if line.startswith("code: "))
    assert code.startswith("code: the runs read model.init=study,") and "differs: model.init" not in code
    assert text.setting[-1] == (
        "set aside, read by no claim: hand_layernorm · init=gpt2, torch_layernorm · init=gpt2 (10 runs): model.init=gpt2 "
        "(the study model.init=study). The lines above are the runs the claims read: hand_layernorm · init=study, torch_layernorm · init=study"
    )
    # Nothing set aside: the setting is this sweep's, as before.
    plain = section_text(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE}))
    assert plain.judged.set_aside == () and not any(line.startswith("set aside") for line in plain.setting)
    assert plain.setting[0].startswith("device: this sweep ")


def test_a_claim_not_tested_at_the_studys_setting_is_not_counted_outside_its_domain() -> None:
    """Issue 62, 9: a sweep at the study's exact setting that lacks the variants: every claim is in its
    domain and not tested, none outside; the counts are data on the judged section (the headline's)."""
    exact = judged_section(study_runs({"torch_layernorm": SEEDS}))
    # Claim 8 (a trend) is untimed without share rounds: not tested, counted, never dropped.
    assert exact.claims == [] and exact.reached(Reach.UNTESTED) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert exact.reached(Reach.OUTSIDE) == exact.reached(Reach.TESTED) == [] and exact.domain_facts == {}
    # Two of its variants: claims 3 and 4 tested, the rest in the domain, not tested.
    two = judged_section(study_runs({"torch_layernorm": SEEDS, "torch_rmsnorm": SEEDS + 0.001 + jitter(1)}))
    assert two.reached(Reach.TESTED) == [3, 4] and two.reached(Reach.UNTESTED) == [1, 2, 5, 6, 7, 8]
    # On a CPU the claims read are outside their domain, with the facts that take them out; a claim whose
    # variants were not swept is not tested here, whatever the setting (it read "outside" before).
    cpu = judged_section(made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, device="cpu"))
    assert cpu.reached(Reach.OUTSIDE) == [1, 5] and cpu.domain_facts[1][0].fact == "CPU run"
    assert cpu.reached(Reach.UNTESTED) == [2, 3, 4, 6, 7, 8] and 2 not in cpu.domain_facts
    counts = [len(cpu.reached(r)) for r in Reach]
    assert sum(counts) == len(cpu.file.claims)  # the headline's counts add up to the file's claims


def test_the_seeds_that_would_settle_claim_6_are_more_than_those_run() -> None:
    """Issue 62, 10: five seeds, no_norm diverged in 2: the count is more than five, and it settles."""
    from scipy import stats

    runs = study_runs({v: SEEDS + jitter(i) for i, v in enumerate(TABLE)})
    runs.loc[runs.run_id.isin(["no_norm0", "no_norm1"]), ["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 540.0, 540.0]
    section = judged_section(runs)
    claim = next(c for c in section.claims if c.claim.number == 6)
    (f,) = claim.findings
    seeds = f.judgement.settle
    assert f.word == INCONCLUSIVE and seeds > 5
    assert f"; about {seeds} seeds per variant would settle it if no_norm diverged in each further run and the others in none" in claim_reason(claim)

    def p(n: int) -> float:  # the counts so far, and n - 5 more seeds of each: no_norm diverging, the others not
        return stats.fisher_exact([[2 + n - 5, 3], [0, 20 + 4 * (n - 5)]], alternative="greater").pvalue

    assert p(seeds) < f.alpha <= p(seeds - 1)


def _cpu_jobs(at_once: bool) -> pd.DataFrame:
    """A 2-seed CPU sweep of the LayerNorms, no speed check: jobs one after another (the local launcher), or at once (SLURM)."""
    runs = made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, seeds=2, device="cpu",
                 precision="fp32 (matmul precision highest)", n_params=3.2e6)  # fmt: skip
    runs.loc[runs.variant == "torch_layernorm", "tokens_per_sec"] *= 1.4  # what the machine's load made of them
    step = 0 if at_once else 60
    return runs.assign(start_time=[pd.Timestamp(0) + pd.Timedelta(seconds=step * i) for i in range(len(runs))])


@pytest.mark.parametrize("at_once", [False, True])
def test_a_time_that_is_not_a_measurement_decides_no_word_and_carries_its_caveat(at_once: bool) -> None:
    """Issue 62, 13: the jobs' times on a CPU read for no word, even at the sweep's own setting, and
    say how they were taken (one after another, or at once under SLURM) wherever they are printed."""
    text = section_text(_cpu_jobs(at_once))
    claim = next(c for c in text.judged.claims if c.claim.number == 1)
    (ln,) = claim.findings
    how = "jobs timed at once on CPUs" if at_once else "jobs timed one after another on CPUs"
    assert ln.word == NOT_APPLICABLE and ln.here_word is None and not ln.effect.measured
    assert f"(paired over 2 seeds; {how}" in claim_line(claim)  # the figure, printed with its caveat
    assert f"LayerNorm not read: {how}" in claim_reason(claim) and "reproduced" not in claim_reason(claim)
    assert ("one after another" in claim_line(claim)) != at_once
    frame = claims_frame(text.judged)
    assert how in frame.query("claim == 1").measured_by.iloc[0]  # claims.csv
    headers = text.table[0]
    assert any(h.startswith("training time s (sweep; jobs ") for h in headers) and any(h.startswith("tokens/s (sweep; jobs ") for h in headers)
    # Not a test: the family counts only the loss parts, and the plot draws no dot of it.
    assert text.judged.family == 1
    # On GPUs each job timed its own device, as the study did: a measurement, judged.
    gpu = judged_section(made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, **STUDY_SETTING))
    assert next(c for c in gpu.claims if c.claim.number == 1).findings[0].effect.measured


def test_the_words_read_the_judged_section_never_through_it() -> None:
    """Issue 62, one writer: StudyText holds the words; the judged data is read on the StudySection."""
    text = section_text(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE}))
    assert isinstance(text.judged, StudySection) and not hasattr(text, "claims") and not hasattr(text, "family")

# --- real sweeps --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_seeds_with_a_diverging_no_norm(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    normal = tiny_sweep.outputs[0]  # hand_layernorm, torch_layernorm x seeds 0, 1, then the speed check
    section = normal[normal.index(HEADING) : normal.index("report written to")]
    assert normal.index("Kernels that ran") < normal.index(HEADING)  # after the table and the speed verdicts
    assert "seeds per variant: this sweep 2; the study 1" in section and "test loss (study)" in section
    analysis = analyze(EXPERIMENT, tiny_sweep.uri)
    study = analysis.study
    claims = {c.claim.number: c for c in study.claims}
    assert sorted(claims) == [1, 5, 6]  # no RMSNorm: claims 2-4 and 7 need it
    # A 1-layer model in fp32 on a CPU: outside every claim's domain, each part saying why.
    assert {c.word for c in claims.values()} == {NOT_APPLICABLE}
    assert claims[1].findings[0].outside[0] == "CPU run: the study's figure comes from its CUDA kernels"
    assert "torch_layernorm fwd=" not in claim_line(claims[1])  # the kernels are the speed section's
    assert "speed check, " in claim_line(claims[1]) and OWN_READING in claim_reason(claims[1])
    # The loss claim still shows its paired figure over two seeds, and says why it cannot settle the question.
    assert "paired over 2 seeds" in claim_line(claims[5]) and "precision fp32, not the study's 16-bit autocast" in claims[5].findings[0].outside
    assert "This sweep cannot settle it" in open_question(claims[5]) and "In fp32 the hand-rolled and built-in norms compute the same function" in open_question(claims[5])
    assert "settles" not in "\n".join(written(analysis).lines())
    exp = tiny_client.get_experiment_by_name(EXPERIMENT).experiment_id
    latest = tiny_client.search_runs([exp], f"tags.`{SWEEP_TAG}` = 'true'", order_by=["attributes.start_time DESC"])[0]
    assert {k: v for k, v in latest.data.tags.items() if k.startswith("normsweep.study.")} == {
        "normsweep.study.claim1": NOT_APPLICABLE, "normsweep.study.claim5": NOT_APPLICABLE, "normsweep.study.claim6": NOT_APPLICABLE,
    }  # fmt: skip
    note = latest.data.tags["mlflow.note.content"]
    assert f"**{HEADING}**" in note and "| test loss (study) |" in note  # the study's table, as Markdown
    md = (tiny_sweep.report_dir / "report.md").read_text()
    assert f"## {HEADING}" in md and "- 5. not applicable here — the built-ins' test loss" in md and "![claims](claims.png)" in md
    assert (tiny_sweep.report_dir / "claims.png").stat().st_size > 10_000
    csv = pd.read_csv(tiny_sweep.report_dir / "claims.csv")
    assert set(csv.claim) == {1, 5, 6} and set(csv.claim_word) == {NOT_APPLICABLE}
    artifacts = {a.path for a in tiny_client.list_artifacts(latest.info.run_id, "report")}
    assert "report/claims.png" in artifacts


@pytest.mark.slow
def test_one_seed_of_rmsnorm_by_qk_norm_without_no_norm(tmp_path: Path, token_cache_dir: Path) -> None:
    out = run_sweep(tmp_path, token_cache_dir, "qk", "norm=hand_rmsnorm,torch_rmsnorm", "model.qk_norm=false,true")
    analysis = analyze("qk", f"sqlite:///{tmp_path / 'mlflow.db'}")
    claims = {c.claim.number: c for c in analysis.study.claims}
    assert sorted(claims) == [1, 5]  # RMSNorm's parts; LayerNorm and no_norm not swept
    assert "LayerNorm not swept" in claim_line(claims[1]) and "(one run each; jobs timed one after another on CPUs" in claim_line(claims[1])
    assert claims[1].word == NOT_APPLICABLE and claim_reason(claims[1]).startswith("outside its domain: CPU run")
    assert claims[5].word == NOT_APPLICABLE and "not a test of the claim: RMSNorm inconclusive: one seed gives no interval" in claim_reason(claims[5])
    # The figure is the QK-norm-off pair's: the study's model.
    off = next(r for r in analysis.comparisons if r.metric == "test_loss" and r.b == "torch_rmsnorm · qk_norm=false")
    assert off.a == "hand_rmsnorm · qk_norm=false" and f"{off.primary.diff:+.4f} nats" in claim_line(claims[5])
    # One seed tests no pair: no tests' heading, the study's section after the table.
    assert "Test loss, paired by seed" not in out
    assert out.index("\nvariant ") < out.index(f"{HEADING} — ") < out.index("1. not applicable here — built-in kernels cut training time")


def test_the_sweep_runs_description_keeps_a_word_per_claim_within_mlflows_limit() -> None:
    from src.report.analysis import Analysis
    from src.report.render.markdown import _verdict, verdict
    from src.report.render.sections import Cut
    from src.tracking.summary import VERDICT_MAX

    # The study's five and the zoo's norms: many pairs, so the whole section would not fit.
    zoo = ["dyt", "fast_dyt", "scalenorm", "fast_rmsnorm", "layernorm_noaffine", "torch_layernorm_nobias"]
    runs = study_runs({v: SEEDS + 0.001 * i for i, v in enumerate([*TABLE, *zoo])})
    analysis = Analysis("study", "sqlite://", "0", runs, pd.DataFrame(), summarize(runs), compare(runs), Margins(), 0,
                        study=judged_section(runs))  # fmt: skip
    text = verdict(analysis)
    assert len(_verdict(analysis, Cut.NONE)) > VERDICT_MAX >= len(text)
    for c in analysis.study.claims:
        assert f"- {c.claim.number}. {c.word} — {c.claim.statement}" in text
    assert text.rstrip().endswith("report.md and claims.png on this run)")
