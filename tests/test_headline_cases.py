"""The headline reads the judgements: each case through the real path (`compare`, `against_study`,
then `headline`), with the word its pair got and a sentence that is true of the numbers.

Made-up sweeps at the study's setting (tests/test_against_study.py's builders): uneven seed sets, a
failed seed, seed sets that share none (Welch), a learning-rate sweep, a divergence, a tie as printed.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_against_study import SEEDS, _runs, _section, _study_runs

from src.report.analysis import Analysis
from src.report.judge.pairs import Margins, Result, compare
from src.report.read.published import TABLE
from src.report.read.table import summarize
from src.report.words.headline import headline, loss_line, real_line, settings_of
from src.stats.verdicts import PairWord


def _analysis(runs: pd.DataFrame) -> Analysis:
    results = compare(runs, Margins())
    return Analysis("cases", "sqlite://", "0", runs, pd.DataFrame(), summarize(runs), results, Margins(), 0, study=_section(runs))


def _pair(a: Analysis, x: str, y: str) -> Result:
    return next(r for r in a.comparisons if r.metric == "test_loss" and {r.a, r.b} == {x, y})


def _gap_text(r: Result, best: str) -> tuple[float, str]:
    """The gap of the other variant to `best` as its pair's judgement has it, and its interval as printed."""
    sign = 1 if r.a == best else -1
    low, high = sorted((sign * r.decision.low, sign * r.decision.high))  # the interval the word was read from
    return sign * r.primary.diff, f"{sign * r.primary.diff:+.4f} [{low:+.4f}, {high:+.4f}] {r.verdict_text(numbers=False)}"


def _reseed(runs: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    return runs.assign(seed=seeds, run_id=[f"{v}{s}" for v, s in zip(runs.variant, seeds, strict=True)])


def test_uneven_seed_sets_the_lowest_is_the_paired_one_not_the_table_mean() -> None:
    """A on seeds 0-4, B on 0, 1, 2, 7 and lower on every shared seed; B's seed 7 is high, so the table's
    unpaired means put A first (3.6000 against 3.6085)."""
    a = _study_runs({"hand_layernorm": SEEDS})
    b = _reseed(_study_runs({"torch_layernorm": np.array([3.579, 3.597, 3.559, 3.70])}, seeds=4), [0, 1, 2, 7])
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
    runs = _study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.0008 + np.array([0.0004, -0.0004, 0.0002, 0.0, -0.0002])})
    runs.loc[(runs.variant == "torch_layernorm") & (runs.seed == 2), ["outcome", "test_loss"]] = ["failed", math.nan]
    analysis = _analysis(runs)
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    gap, text = _gap_text(r, "hand_layernorm")
    assert r.decision.low <= gap <= r.decision.high and r.decision.level == pytest.approx(0.9)  # TOST's interval: the one that decided it
    loss = loss_line(analysis)
    assert f"torch_layernorm {text} (paired over 4 seeds)" in loss and "+0.0007 [+0.0003, +0.0012]" in loss, loss
    assert "over up to 5 seeds, paired on the seeds both finished (n = 4)" in real_line(analysis)


def test_seed_sets_that_share_none_are_said_unpaired() -> None:
    a = _study_runs({"hand_layernorm": SEEDS})
    b = _reseed(_study_runs({"torch_layernorm": SEEDS - 0.03}), [5, 6, 7, 8, 9])
    analysis = _analysis(pd.concat([a, b], ignore_index=True))
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    assert r.primary.test == "welch"
    loss, real = loss_line(analysis), real_line(analysis)
    assert "no seed finished by every variant" in loss and "unpaired (Welch: seed sets differ), n = 5 and 5" in loss, loss
    assert "paired" not in real.replace("unpaired", ""), real
    assert "1 pair(s) unpaired (Welch: seed sets differ)" in real


def _lr_sweep() -> pd.DataFrame:
    frames = []
    for i, lr in enumerate((0.001, 0.01)):
        runs = _study_runs({v: SEEDS[:3] + 0.001 * j + 0.05 * i + np.array([0.0, 0.0002 * j, -0.0001 * j]) for j, v in enumerate(TABLE)}, seeds=3)
        runs = runs.assign(**{"axis.norm": runs.norm, "axis.optim.lr": str(lr), "lr": lr, "lr_variant": runs.variant})
        frames.append(runs.assign(variant=runs.variant + f" · lr={lr}", run_id=runs.run_id + f"-{lr}"))
    return pd.concat(frames, ignore_index=True)


def test_a_learning_rate_sweep_is_read_per_setting_never_pooled() -> None:
    analysis = _analysis(_lr_sweep())
    assert [s.label for s in settings_of(analysis.runs)] == ["lr=0.001", "lr=0.01"]
    loss = loss_line(analysis)
    assert loss.startswith("Loss, per setting (the settings are not pooled): at lr=0.001: lowest test loss hand_layernorm 3.6000"), loss
    assert "; at lr=0.01: lowest test loss hand_layernorm 3.6500" in loss and "· lr=" not in loss
    within = [r for r in analysis.comparisons if r.metric == "test_loss" and not r.axis.endswith("lr")]
    across = [r for r in analysis.comparisons if r.metric == "test_loss" and r.axis.endswith("lr")]
    assert len(across) == 5 and len(within) == 16
    real = real_line(analysis)
    assert f"of {len(within)} pair(s)" in real and f"{len(across)} pair(s) across settings are in the pair lines" in real, real


def test_a_diverged_variant_is_named_in_the_loss_line() -> None:
    """`norm=torch_layernorm,no_norm optim.lr=50`: no_norm diverged at step 4, torch_layernorm's loss exploded."""
    runs = _runs({"torch_layernorm": "torch_layernorm", "no_norm": "no_norm"}, seeds=1, device="cpu", lr=50.0)
    runs.loc[runs.variant == "torch_layernorm", "test_loss"] = 182919.75
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done", "test_loss"]] = ["diverged", 4.0, 4.0, math.nan]
    assert loss_line(_analysis(runs)) == "Loss: torch_layernorm 182919.7500, the only variant that finished; no_norm diverged (1/1 runs, step 4)."


def test_a_tie_is_the_verdicts_never_the_rounding() -> None:
    """Equal to 4 decimals, and a real (tiny) difference on every seed: the pair's word says so."""
    runs = _study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS + 0.00004 + np.array([1, -1, 0.5, 0, -0.5]) * 1e-6})
    analysis = _analysis(runs)
    r = _pair(analysis, "hand_layernorm", "torch_layernorm")
    loss = loss_line(analysis)
    assert "tied" not in loss and f"torch_layernorm {_gap_text(r, 'hand_layernorm')[1]}" in loss, loss
    assert r.verdict_text(numbers=False) == "equivalent within ±0.01, a difference remains"


def test_one_seed_each_says_no_interval_once() -> None:
    runs = _study_runs({"hand_layernorm": SEEDS[:1], "torch_layernorm": SEEDS[:1] - 0.02}, seeds=1)
    lines = headline(_analysis(runs))
    assert lines[1] == "Loss: lowest test loss torch_layernorm 3.5800 (the one seed every variant here finished); then hand_layernorm +0.0200 (one run each: no interval)."
