"""Made-up sweeps at the study's setting, taken through the report's real path (`compare`, then
`against_study`): the runs frame src.report.read.runs reads, a speed check's samples as variants.json
holds them, and the study's section they make. The verdict, headline, pair-word and render tests
build their cases with these."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from src.report.judge.pairs import Margins, compare
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.study import ClaimResult, StudySection, against_study
from src.report.read.claims import ClaimsFile
from src.report.read.table import summarize
from src.report.words.study import StudyText, study_text
from src.tracking.variants import Axis

STUDY_SETTING = {"device_type": "cuda", "device_name": "NVIDIA A100-SXM4-40GB", "n_params": 163_009_536.0,
                 "tokens": 3_260_252_160.0, "precision": "fp16_mixed (matmul precision high)", "steps_done": 33_165.0}  # fmt: skip


def made_up_runs(variants: dict[str, str], seeds: int = 3, device: str = "cuda", **columns: object) -> pd.DataFrame:
    """A runs frame as src.report.read.runs reads it (label -> norm), every run finished."""
    rng = np.random.default_rng(0)
    # The jobs' tokens/s moves run to run (about 0.3% here) on a generator of its own, so the test
    # losses stay the ones drawn before: no two variants run at exactly the same speed on every seed.
    jobs = np.random.default_rng(7)
    rows = []
    for label, norm in variants.items():
        for seed in range(seeds):
            rows.append({
                "run_id": f"{label}{seed}", "variant": label, "norm": norm, "family": norm.split("_")[-1], "seed": seed,
                "outcome": "finished", "lr": 1e-3, "test_loss": 3.6 + 0.05 * seed + rng.normal(0, 1e-4),
                "tokens_per_sec": (1000.0 + seed) * (1 + jobs.normal(0, 0.003)), "train_time_s": 10.0, "stopped_at_step": math.nan, "steps_done": 100.0,
                "start_time": pd.Timestamp(0), "devices": 1.0, "device_type": device, "device_name": "H100",
                "model": "gpt2_small", "n_params": 1e8, "tokens": 1e9, "precision": "bf16", "dispatch": "fwd=fused bwd=fused",
                "model.norm_placement": "pre", "model.qk_norm": "False", **columns,
            })  # fmt: skip
    return pd.DataFrame(rows)


def study_runs(loss: dict[str, list[float]] | None = None, speed: dict[str, list[float]] | None = None,
                seeds: int = 5) -> pd.DataFrame:  # fmt: skip
    """A GPU sweep at the study's setting: per variant its test loss and tokens/s, seed by seed."""
    names = list(dict.fromkeys([*(loss or {}), *(speed or {})]))
    runs = made_up_runs({v: v for v in names}, seeds=seeds, **STUDY_SETTING)
    for v, values in (loss or {}).items():
        runs.loc[runs.variant == v, "test_loss"] = values
    for v, values in (speed or {}).items():
        runs.loc[runs.variant == v, "tokens_per_sec"] = values
    return runs


def speed_check(norm_ms: dict[str, float], step_ms: float = 100.0, rounds: int = 30) -> dict[str, object]:
    """A speed check's samples (variants.json): each norm's seconds per step and whole steps, per round."""
    rng = np.random.default_rng(1)
    norms = {v: list(ms / 1e3 * (1 + rng.normal(0, 0.02, rounds))) for v, ms in norm_ms.items()}
    steps = {v: list((step_ms + ms) / 1e3 * (1 + rng.normal(0, 0.01, rounds))) for v, ms in norm_ms.items()}
    return {"kernel": {"samples_s": norms, "step_s": step_ms / 1e3}, "samples_s": steps, "settings": {"variants": list(norm_ms)}}


def study_section(runs: pd.DataFrame, axes: Sequence[Axis], check: Mapping[str, Any], margins: Margins,
                  table: pd.DataFrame | None = None, sequential: Sequence[SequentialVerdict] = (),
                  source: ClaimsFile | None = None) -> StudyText:  # fmt: skip
    """The section for a sweep, judged (src.report.judge.study.against_study) and written (`study_text`)."""
    return study_text(against_study(runs, axes, check, margins, sequential, source), runs, table, check)


def section_text(runs: pd.DataFrame, check: dict[str, object] | None = None, sequential: tuple = (), axes: tuple = ()) -> StudyText:  # noqa: ANN001
    """The section in words, through the real path."""
    # The report's own comparisons first, as analyze() makes them: the section must not lean on them.
    compare(runs, Margins())
    return study_section(runs, axes, check or {}, Margins(), summarize(runs), sequential)


def judged_section(runs: pd.DataFrame, check: dict[str, object] | None = None, sequential: tuple = (), axes: tuple = ()) -> StudySection:  # noqa: ANN001
    """The section's judgements (what Analysis.study holds), read as data."""
    return section_text(runs, check, sequential, axes).judged


def claims_of(runs: pd.DataFrame, check: dict[str, object] | None = None, sequential: tuple = (), axes: tuple = ()) -> dict[int, ClaimResult]:  # noqa: ANN001
    return {c.claim.number: c for c in judged_section(runs, check, sequential, axes).claims}


SEEDS = np.array([3.60, 3.62, 3.58, 3.61, 3.59])  # one run's test loss, seed to seed (SD 0.016)
# Five per-seed offsets with mean 0 and SD 1: a stated spread, scaled.
Z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / np.std([-2.0, -1.0, 0.0, 1.0, 2.0], ddof=1)  # mean 0, SD 1
NOISE = np.array([0.0002, -0.0003, 0.0001, 0.0, -0.0001])


def jitter(k: int) -> np.ndarray:
    """A variant's own seed-to-seed noise (NOISE shifted by k): two variants never differ by exactly the
    same amount on every seed, as no two real norms do."""
    return np.roll(NOISE, k)
