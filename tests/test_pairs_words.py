"""The pairs' words through the real path (`compare` on made-up runs, then src.report.words.pairs):
the family printed is the one Holm adjusted over, a spread below the values' resolution reads as no
spread, no p prints as 0, every interval says its level, and an *inconclusive* beside a 95% interval
that excludes zero carries the Holm p that decided it."""

from __future__ import annotations

import math
import re
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
from study_runs import SEEDS, jitter, study_runs

from src.core.schema import MarginSchema
from src.report.analysis import Analysis
from src.report.judge.pairs import Margins, Result, compare, family_of
from src.report.read.table import summarize
from src.report.words.numbers import p_text
from src.report.words.pairs import heading, sentences, to_frame
from src.stats.inference import RESOLUTION, paired_t, trimmed_mean_interval, welch_interval
from src.stats.verdicts import PairWord

Z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / np.std([-2.0, -1.0, 0.0, 1.0, 2.0], ddof=1)  # mean 0, SD 1


def _analysis(runs: pd.DataFrame) -> tuple[Analysis, list[Result]]:
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
    a, results = _analysis(runs)
    adjusted = sum(math.isfinite(r.p_holm) for r in results)
    assert family_of(results) == adjusted == len(results) - 1 and {r.family for r in results} == {adjusted}
    assert f"Holm-adjusted over the {adjusted} of {len(results)} comparisons with a p-value" in heading(a)
    # Every pair with a p-value: the count alone, as before.
    full, results = _analysis(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.003 + jitter(2)}))
    assert f"Holm-adjusted over {len(results)} comparisons;" in heading(full)


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
    assert welch_interval(np.full(3, 3.6) + Z[:3] * 1e-12, np.full(3, 3.5) + Z[2:] * 1e-12).se == 0
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
