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

from src.core import paths
from src.report import analyze
from src.report.against_study import (
    HEADING,
    NOT_REPRODUCED,
    REPRODUCED,
    UNTESTABLE,
    Found,
    against_study,
    word_for,
)
from src.report.comparisons import Margins, compare
from src.report.published import CLAIMS, EQUIVALENT, LOSS, LOWER, SETTING, SPEED, STABILITY, TABLE
from src.tracking.sweep import SWEEP_TAG

# --- the study as data ------------------------------------------------------------------------------


def test_the_claims_quote_the_studys_table_and_the_preset_is_its_setting() -> None:
    claims = {c.number: c for c in CLAIMS}
    assert sorted(claims) == [1, 2, 3, 4, 5, 6]
    ln, rms = claims[1].parts
    assert ln.published(SPEED) == pytest.approx(8324 / 9358 - 1) and round(ln.published(SPEED), 3) == -0.110
    assert round(rms.published(SPEED), 3) == -0.093
    assert round(claims[2].parts[0].published(SPEED), 3) == -0.024  # hand-rolled RMSNorm ~2.5% faster
    assert abs(claims[3].parts[0].published(SPEED)) < 0.005  # the built-ins within ~0.5%
    assert [round(p.published(LOSS), 4) for p in claims[4].parts] == [0.006, 0.0012]
    assert [round(p.published(LOSS), 3) for p in claims[5].parts] == [-0.024, -0.029]
    assert claims[6].parts[0].published(STABILITY) == 530
    assert paths.preset_norms("gpt2_small_study") == list(TABLE)  # the study's five, swept in its table's order
    preset = paths.compose(["experiment=gpt2_small_study"])
    assert int(preset.optim.token_budget) == SETTING.tokens and preset.precision.name == "fp16_mixed"
    assert (preset.model.norm_placement, preset.model.qk_norm) == ("pre", False)


# --- words from numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "test,outcome,word,reason",
    [
        (LOWER, "lower", REPRODUCED, ""),
        (LOWER, "higher", NOT_REPRODUCED, "the opposite direction"),
        (LOWER, "equivalent", NOT_REPRODUCED, "equivalent within ±0.01 nats"),
        (LOWER, "undecided", UNTESTABLE, "undecided: about 9 seeds would settle it"),
        (LOWER, "no interval", UNTESTABLE, "one seed"),
        (EQUIVALENT, "equivalent", REPRODUCED, ""),
        (EQUIVALENT, "lower", NOT_REPRODUCED, "they differ"),
        (EQUIVALENT, "no interval", UNTESTABLE, "one seed"),
    ],
)
def test_a_claims_word_from_what_the_sweep_found(test: str, outcome: str, word: str, reason: str) -> None:
    detail = "about 9 seeds would settle it" if outcome == "undecided" else "±0.01 nats"
    assert word_for(test, Found(outcome, "fig", detail), "one seed") == (word, reason)


def _runs(variants: dict[str, str], seeds: int = 3, device: str = "cuda", **columns: object) -> pd.DataFrame:
    """A runs frame as src.report.runs reads it (label -> norm), every run finished."""
    rng = np.random.default_rng(0)
    rows = []
    for label, norm in variants.items():
        for seed in range(seeds):
            rows.append({
                "run_id": f"{label}{seed}", "variant": label, "norm": norm, "family": norm.split("_")[-1], "seed": seed,
                "outcome": "finished", "lr": 1e-3, "test_loss": 3.6 + 0.05 * seed + rng.normal(0, 1e-4),
                "tokens_per_sec": 1000.0 + seed, "train_time_s": 10.0, "stopped_at_step": math.nan, "steps_done": 100.0,
                "start_time": pd.Timestamp(0), "devices": 1.0, "device_type": device, "device_name": "H100",
                "model": "gpt2_small", "n_params": 1e8, "tokens": 1e9, "precision": "bf16", "dispatch": "fwd=fused bwd=fused",
                "model.norm_placement": "pre", "model.qk_norm": "False", **columns,
            })  # fmt: skip
    return pd.DataFrame(rows)


def _check(norm_ms: dict[str, float], step_ms: float = 100.0, rounds: int = 30) -> dict[str, object]:
    """A speed check's samples (variants.json): each norm's seconds per step and whole steps, per round."""
    rng = np.random.default_rng(1)
    norms = {v: list(ms / 1e3 * (1 + rng.normal(0, 0.02, rounds))) for v, ms in norm_ms.items()}
    steps = {v: list((step_ms + ms) / 1e3 * (1 + rng.normal(0, 0.01, rounds))) for v, ms in norm_ms.items()}
    return {"kernel": {"samples_s": norms, "step_s": step_ms / 1e3}, "samples_s": steps, "settings": {"variants": list(norm_ms)}}


def _claims(runs: pd.DataFrame, check: dict[str, object]) -> dict[int, object]:
    section = against_study(runs, (), compare(runs, Margins()), check, Margins())
    return {c.claim.number: c for c in section.claims}


def test_on_cuda_the_speed_claims_are_judged_by_the_speed_check() -> None:
    five = {v: v for v in TABLE}
    runs = _runs(five)
    # Built-ins 10 ms cheaper per 100 ms step than the hand-rolled norms, RMSNorm 2 ms cheaper than LayerNorm.
    check = _check({"hand_layernorm": 14.0, "torch_layernorm": 4.0, "hand_rmsnorm": 12.0, "torch_rmsnorm": 4.0, "no_norm": 0.0})
    claims = _claims(runs, check)
    assert claims[1].word == REPRODUCED and "speed check" in claims[1].sentence()
    assert claims[2].word == REPRODUCED and claims[3].word == REPRODUCED
    # Slower built-ins: the opposite of the study's claim.
    slower = _claims(runs, _check({"hand_layernorm": 4.0, "torch_layernorm": 14.0, "hand_rmsnorm": 4.0, "torch_rmsnorm": 14.0}))
    assert slower[1].word == NOT_REPRODUCED and "the opposite direction" in slower[1].reason
    assert slower[3].word == REPRODUCED  # the two built-ins still equal
    # The same numbers on a CPU are not the study's kernels.
    cpu = _claims(_runs(five, device="cpu"), check)
    assert [cpu[n].word for n in (1, 2, 3)] == [UNTESTABLE] * 3
    assert cpu[1].reason == "CPU run: the study's speed claims are about CUDA kernels"
    # What the sweep shows instead: its figure with its interval, and the kernels that ran.
    assert "LayerNorm -10.0% [-10.1%, -9.9%] step time (speed check, from the norms' kernels: faster), kernels hand_layernorm fwd=fused" in cpu[1].sentence()


def test_without_a_speed_check_a_gpu_sweep_is_judged_by_its_paired_runs() -> None:
    runs = _runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"})
    runs.loc[runs.variant == "torch_layernorm", "tokens_per_sec"] *= 1.12  # 12% more tokens/s: -10.7% time
    claims = _claims(runs, {})
    assert claims[1].word == REPRODUCED and "-10.7% [" in claims[1].sentence() and "paired over 3 seeds" in claims[1].sentence()
    # Two noisy seeds: a t-interval of the tokens/s change below -100% is an unbounded time.
    noisy = runs[runs.seed < 2].copy()
    noisy.loc[noisy.variant == "torch_layernorm", "tokens_per_sec"] = [400.0, 1500.0]
    assert "+5.3% [-87.4%, +∞] training time, per run" in _claims(noisy, {})[1].sentence()
    one = _claims(runs[runs.seed == 0], {})
    assert one[1].word == UNTESTABLE and one[1].reason.startswith("one run each: a ratio without an interval")
    assert one[5].reason == "one seed cannot answer it (≥2 seeds do: seed=0,1,2)"


def test_a_variant_off_the_studys_model_is_untestable_and_says_why() -> None:
    runs = _runs({"torch_layernorm": "torch_layernorm", "torch_rmsnorm": "torch_rmsnorm"}, **{"model.norm_placement": "post"})
    claims = _claims(runs, {})
    assert sorted(claims) == [3, 4] and {c.word for c in claims.values()} == {UNTESTABLE}
    assert claims[4].reason == (
        "not the study's setting: torch_layernorm has model.norm_placement=post (the study pre); "
        "not the study's setting: torch_rmsnorm has model.norm_placement=post (the study pre)"
    )


def test_a_sweep_without_the_studys_variants_gets_one_line() -> None:
    section = against_study(_runs({"dyt": "dyt", "scalenorm": "scalenorm"}), (), [], {}, Margins())
    assert section.lines() == [f"{HEADING}: this sweep ran none of the study's variants "
                               "(hand_layernorm, torch_layernorm, hand_rmsnorm, torch_rmsnorm, no_norm); nothing to compare."]  # fmt: skip
    assert section.tags() == {}


# --- real sweeps --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_seeds_with_a_diverging_no_norm(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    normal = tiny_sweep.outputs[0]  # hand_layernorm, torch_layernorm x seeds 0, 1, then the speed check
    section = normal[normal.index(HEADING) : normal.index("report written to")]
    assert normal.index("Kernels that ran") < normal.index(HEADING)  # after the table and the speed verdicts
    assert "seeds per variant: this sweep 2; the study 1" in section
    claims = {c.claim.number: c for c in analyze(EXPERIMENT, tiny_sweep.uri).study.claims}
    assert sorted(claims) == [1, 5, 6]  # no RMSNorm: claims 2-4 need it
    assert claims[1].word == UNTESTABLE and "torch_layernorm fwd=fused bwd=fused" in claims[1].sentence()
    assert claims[1].reason == "CPU run: the study's speed claims are about CUDA kernels"
    assert "speed check, from the norms' kernels" in claims[1].sentence()
    # Two implementations of one function, two seeds: equivalent, so the study's edge was seed noise.
    assert claims[5].word == NOT_REPRODUCED and "paired over 2 seeds" in claims[5].sentence()
    assert claims[5].reason == "equivalent within ±0.01 nats: the edge is seed noise, which settles the study's open question"
    # no_norm diverged, but at lr 1e6 (helpers.DIVERGING): not the study's like-for-like run.
    assert claims[6].word == UNTESTABLE and "2/2 runs diverged" in claims[6].sentence()
    assert claims[6].reason == "no_norm at lr 1e+06, the normalized variants at 0.001: not like for like"
    exp = tiny_client.get_experiment_by_name(EXPERIMENT).experiment_id
    latest = tiny_client.search_runs([exp], f"tags.`{SWEEP_TAG}` = 'true'", order_by=["attributes.start_time DESC"])[0]
    assert {k: v for k, v in latest.data.tags.items() if k.startswith("normsweep.study.")} == {
        "normsweep.study.claim1": UNTESTABLE, "normsweep.study.claim5": NOT_REPRODUCED, "normsweep.study.claim6": UNTESTABLE,
    }  # fmt: skip
    assert f"**{HEADING}**" in latest.data.tags["mlflow.note.content"]
    md = (tiny_sweep.report_dir / "report.md").read_text()
    assert f"## {HEADING}" in md and "- 5. the built-ins' test loss" in md


@pytest.mark.slow
def test_one_seed_of_rmsnorm_by_qk_norm_without_no_norm(tmp_path: Path, token_cache_dir: Path) -> None:
    out = run_sweep(tmp_path, token_cache_dir, "qk", "norm=hand_rmsnorm,torch_rmsnorm", "model.qk_norm=false,true")
    analysis = analyze("qk", f"sqlite:///{tmp_path / 'mlflow.db'}")
    claims = {c.claim.number: c for c in analysis.study.claims}
    assert sorted(claims) == [1, 5]  # RMSNorm's parts; LayerNorm and no_norm not swept
    assert "LayerNorm not swept" in claims[1].sentence() and "one run each, one after another" in claims[1].sentence()
    assert claims[1].word == UNTESTABLE and claims[1].reason.startswith("CPU run")
    assert claims[5].word == UNTESTABLE and claims[5].reason == "one seed cannot answer it (≥2 seeds do: seed=0,1,2)"
    # The figure is the QK-norm-off pair's: the study's model.
    off = next(r for r in analysis.comparisons if r.metric == "test_loss" and r.b == "torch_rmsnorm · qk_norm=false")
    assert off.a == "hand_rmsnorm · qk_norm=false" and f"{off.primary.diff:+.4f} nats" in claims[5].sentence()
    assert out.index("Paired by seed") < out.index(f"{HEADING} — ") < out.index("1. built-in kernels cut training time")
