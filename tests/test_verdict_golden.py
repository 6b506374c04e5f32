"""Golden words: every verdict word the report gave for the existing test cases, frozen before the
rule moved into src/stats/verdicts.py, so that the move changes no word by accident.

`tests/golden_verdicts.json` holds the words (claim words, part words, pair verdicts, speed verdicts)
for each scenario below, `tests/golden_reasons.json` what is written from them (each claim's and
part's reason as claims.csv holds it, the pair lines, the speed lines, the headline). A word or a
sentence that differs from the frozen one fails: every text is checked against today's output.
Freeze again with `NORMSWEEP_GOLDEN=write pytest tests/test_verdict_golden.py` only when a word or
sentence is meant to change, and say why in that commit: the golden files' diff lists the changes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from study_runs import (
    NOISE,
    SEEDS,
    STUDY_SETTING,
    jitter,
    made_up_runs,
    speed_check,
    study_runs,
    study_section,
)

from src.report.analysis import Analysis
from src.report.judge.pairs import Margins, compare
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.speed import compare_speed
from src.report.read.published import TABLE
from src.report.read.table import summarize
from src.report.words.headline import headline
from src.report.words.pairs import sentences
from src.report.words.speed import sentence
from src.report.words.study import claim_reason, here_text, part_reason

GOLDEN = Path(__file__).with_name("golden_verdicts.json")
GOLDEN_REASONS = Path(__file__).with_name("golden_reasons.json")
WHY = "why: "  # a reason's key: frozen in GOLDEN_REASONS, beside its word's
REFREEZE = ("freeze it again with `NORMSWEEP_GOLDEN=write pytest tests/test_verdict_golden.py` and say why "
            "in the commit that changes it (the golden files' diff lists every word and sentence it moved)")



def _words(runs: pd.DataFrame, check: dict[str, Any] | None = None, sequential: tuple = ()) -> dict[str, str]:  # noqa: ANN001
    results = compare(runs, Margins())
    out = {f"pair {r.pair} {r.metric}": str(r.verdict) for r in results}
    section = study_section(runs, (), check or {}, Margins(), summarize(runs), sequential).judged
    # The reasons beside the words (claims.csv's reason columns, the pair lines, the headline):
    # frozen in their own file, keys that start with WHY.
    out.update({f"{WHY}pair line {i}": line for i, line in enumerate(sentences(results))})
    analysis = Analysis("golden", "sqlite://", "0", runs, pd.DataFrame(), summarize(runs), results, Margins(), 0, study=section)
    out.update({f"{WHY}headline line {i}": line for i, line in enumerate(headline(analysis))})
    for c in section.claims:
        out[f"claim {c.claim.number}"] = str(c.word)
        out[f"{WHY}claim {c.claim.number}"] = claim_reason(c)
        out.update({f"claim {c.claim.number} part {f.part.label or f.part.b}": str(f.word) for f in c.findings})
        out.update({f"{WHY}claim {c.claim.number} part {f.part.label or f.part.b}": part_reason(f) for f in c.findings})
        # Outside the domain: the word the part reads at the sweep's own setting.
        out.update({f"claim {c.claim.number} part {f.part.label or f.part.b} here": str(f.here_word) for f in c.findings if here_text(f)})
    return out


def _speed() -> dict[str, str]:
    """test_speed_check's by-hand check: four pairs against one reference."""
    rng = np.random.default_rng(0)
    n, step = 200, 0.1
    norm = 0.004 * (1 + rng.normal(0, 0.02, n))
    steps = step * (1 + rng.normal(0, 0.01, n))
    check = {
        "samples_s": {"a": steps, "same": steps * (1 + rng.normal(0, 0.01, n)), "costly": steps + 0.01,
                      "contradicting": steps * 0.8, "noisy": steps},
        "kernel": {"step_s": step, "samples_s": {"a": norm, "same": norm * (1 + rng.normal(0, 0.02, n)), "costly": norm + 0.01,
                   "contradicting": norm + 0.01, "noisy": norm + 0.0015 + rng.normal(0, 0.03, n)}},
    }  # fmt: skip
    pairs = [("a", b) for b in ("same", "costly", "contradicting", "noisy")]
    verdicts = compare_speed(check, pairs, margin=0.02)
    return {f"speed {v.b}": str(v.verdict) for v in verdicts} | {f"{WHY}speed {v.b}": sentence(v) for v in verdicts}


def _hand_ln() -> np.ndarray:
    return np.full(5, 1000.0) + np.arange(5)


def _b_speed(rms_gap: float) -> dict[str, np.ndarray]:
    hand_ln, jitter = _hand_ln(), 1 + np.array([0.001, -0.001, 0.0005, 0.0, -0.0005])
    return {"hand_layernorm": hand_ln, "torch_layernorm": hand_ln * 1.03 * jitter,
            "hand_rmsnorm": hand_ln / (1 - rms_gap) * jitter[::-1], "torch_rmsnorm": hand_ln * 1.03 / (1 - 0.014) * jitter}  # fmt: skip


def _e(case: str) -> pd.DataFrame:
    if case == "collapse":
        runs = made_up_runs({v: v for v in TABLE}, device="cpu", precision="fp32 (matmul precision highest)", n_params=1.4e7)
        runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 23.0, 23.0]
        return runs
    runs = study_runs({v: SEEDS + jitter(i) for i, v in enumerate(TABLE)})
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 540.0, 540.0]
    if case in ("all", "fine"):
        runs[["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 40.0, 40.0]
    if case == "fine":
        runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["finished", math.nan, 33_165.0]
    return runs


def _sequential(verdict: str) -> dict[str, str]:
    runs = study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE})
    look = 2 if verdict == "different" else None
    return _words(runs, sequential=(SequentialVerdict("torch_layernorm vs hand_layernorm", "test_loss", verdict, look, 4, 0.02, 0.02),))


FIVE = {v: v for v in TABLE}
CHECK = {"hand_layernorm": 14.0, "torch_layernorm": 4.0, "hand_rmsnorm": 12.0, "torch_rmsnorm": 4.0, "no_norm": 0.0}
SCENARIOS: dict[str, Callable[[], dict[str, str]]] = {
    "a_partly": lambda: _words(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0052 + NOISE,
                                            "hand_rmsnorm": SEEDS + 0.001 + jitter(2), "torch_rmsnorm": SEEDS + 0.001 - 0.0049 - NOISE})),
    "b_size": lambda: _words(study_runs(speed=_b_speed(0.014))),
    "b_size_reproduced": lambda: _words(study_runs(speed=_b_speed(0.024))),
    "c_straddles": lambda: _words(study_runs({"hand_layernorm": SEEDS,
                                               "hand_rmsnorm": SEEDS + np.array([0.0089, 0.0075, 0.0103, 0.0089, 0.0089])})),
    "d_one_part": lambda: _words(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.0242 + NOISE, "hand_rmsnorm": SEEDS + jitter(2),
                                              "torch_rmsnorm": SEEDS - 0.01 + np.array([0.02, -0.03, 0.01, 0.0, -0.01])})),
    "d_alone": lambda: _words(study_runs({"hand_layernorm": SEEDS, "torch_layernorm": SEEDS - 0.025 + NOISE})),
    "e_diverged": lambda: _words(_e("diverged")),
    "e_all": lambda: _words(_e("all")),
    "e_fine": lambda: _words(_e("fine")),
    "e_collapse": lambda: _words(_e("collapse")),
    "seq_undecided": lambda: _sequential("undecided"),
    "seq_different": lambda: _sequential("different"),
    "gpu_check": lambda: _words(made_up_runs(FIVE, **STUDY_SETTING), speed_check(CHECK)),
    "cpu_check": lambda: _words(made_up_runs(FIVE, device="cpu"), speed_check(CHECK)),
    "post": lambda: _words(made_up_runs({"torch_layernorm": "torch_layernorm", "torch_rmsnorm": "torch_rmsnorm"}, **{"model.norm_placement": "post"})),
    "one_seed": lambda: _words(study_runs({"hand_layernorm": SEEDS[:1], "torch_layernorm": SEEDS[:1] - 0.02}, seeds=1)),
    "one_seed_cpu": lambda: _words(made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, seeds=1, device="cpu")),
    "table": lambda: _words(_table_runs()),
    "one_seed_study": lambda: _words(_one_seed_study()),
    "speed_by_hand": _speed,
}


# The headline's Loss line reads the pairs' judgements now (the gap its word was decided on, per
# setting, paired only where paired, the diverged named); its seeds line says paired only where paired.
def _table_runs() -> pd.DataFrame:
    runs = study_runs({v: SEEDS + 0.001 * i + jitter(i) for i, v in enumerate(TABLE)})
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step"]] = ["diverged", 530.0]
    return runs


def _one_seed_study() -> pd.DataFrame:
    """test_report's one-seed replica of the study: its own numbers, no_norm NaN at step 530."""
    runs = study_runs(seeds=1, speed={v: [TABLE[v].tokens_per_sec] for v in list(TABLE)[:4]},
                       loss={v: [TABLE[v].test_loss] for v in list(TABLE)[:4]} | {"no_norm": [math.nan]})
    runs["steps_done"] = 100.0
    runs.loc[runs.variant == "no_norm", ["outcome", "stopped_at_step", "steps_done"]] = ["diverged", 530.0, 529.0]
    return runs


def _drift(frozen: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> list[str]:
    assert sorted(frozen) == sorted(now)
    drift = []
    for name, words in frozen.items():
        for key in sorted(set(words) | set(now[name])):
            if words.get(key) != now[name].get(key):
                drift.append(f"{name}: {key}: frozen {words.get(key)!r}, now {now[name].get(key)!r}")
    return drift


def _now() -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """Per scenario its words, and its reasons (the keys that start with WHY)."""
    found = {name: make() for name, make in SCENARIOS.items()}
    words = {name: {k: v for k, v in got.items() if not k.startswith(WHY)} for name, got in found.items()}
    reasons = {name: {k: v for k, v in got.items() if k.startswith(WHY)} for name, got in found.items()}
    if os.environ.get("NORMSWEEP_GOLDEN") == "write":
        for path, data in ((GOLDEN, words), (GOLDEN_REASONS, reasons)):
            path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return words, reasons


def test_no_word_or_reason_changed_by_accident() -> None:
    words, reasons = _now()
    drift = _drift(json.loads(GOLDEN.read_text(encoding="utf-8")), words)
    assert not drift, f"a verdict word changed; if on purpose, {REFREEZE}:\n" + "\n".join(drift)
    drift = _drift(json.loads(GOLDEN_REASONS.read_text(encoding="utf-8")), reasons)
    assert not drift, f"a reason, pair line or headline changed; if on purpose, {REFREEZE}:\n" + "\n".join(drift)
