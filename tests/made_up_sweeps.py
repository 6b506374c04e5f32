"""Made-up sweeps for the report's property tests (tests/test_report_properties.py): hypothesis
strategies that draw a sweep as src.report.read.runs reads it (one row per run) and a speed check as
`python -m src.bench variants` writes it (variants.json); the property test takes each through the
report's real path (`src.report.analysis.assemble`, then the words), without MLflow.

What varies is what a real sweep can hold: built-in and user norms, 1-12 seeds per variant with gaps
and unequal sets, failed and diverged runs, bit-identical and near-identical implementations, spreads
from none to large, the CPU default or the study's own setting, an init or a precision axis, a speed
check of 2 to 40 rounds (its whole steps as few as 2), and a sequential sweep's decisions.
"""

from __future__ import annotations

import atexit
import itertools
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import strategies as st

from src.report.judge.pairs import comparison_pairs
from src.report.judge.sequential import SequentialVerdict
from src.report.read.claims import ClaimsFile, model_sizes, parse
from src.report.read.published import STUDY as STUDY_CLAIMS
from src.report.read.table import AXIS_PREFIX
from src.stats.pairs import pair_label
from src.stats.verdicts import SequentialWord
from src.tracking.variants import Axis

BUILT_INS = ("hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm", "no_norm")
FAMILY = {"hand_layernorm": "layernorm", "torch_layernorm": "layernorm", "hand_rmsnorm": "rmsnorm",
          "torch_rmsnorm": "rmsnorm", "no_norm": "none", "my_rms": "rmsnorm", "my_ln": "layernorm"}  # fmt: skip
USER = ("my_rms", "my_ln")  # norms no conf/norm YAML names: a user's, by `_target_`
MAX_SEEDS = 12
AXIS_KEYS = {"model.init": "model.init", "precision": "precision.name"}  # an axis's name -> the key that names its value

# The study's own setting (its preset's runs), and the CPU default's.
STUDY = {"device_type": "cuda", "device_name": "NVIDIA A100-SXM4-40GB", "n_params": 163_009_536.0, "devices": 8.0,
         "tokens": 3_260_252_160.0, "precision": "fp16_mixed (matmul precision high)", "steps_done": 33_165.0,
         "model": "gpt2_small", "lr": 6e-4}  # fmt: skip
CPU = {"device_type": "cpu", "device_name": "cpu", "n_params": 4_000_000.0, "devices": 1.0, "tokens": 600_000.0,
       "precision": "32-true", "steps_done": 150.0, "model": "cpu_small", "lr": 1e-3}  # fmt: skip

# How far a variant's loss sits from the first one's: none (bit-identical when its noise is none
# too), below any printed digit, inside the margin, beyond it.
OFFSETS = (0.0, 0.0, 1e-9, 3e-4, 0.002, 0.006, 0.03, -0.002, -0.03)
# A run's own noise around its variant's mean (on top of the seed's, which pairing removes).
SPREADS = (0.0, 0.0, 1e-12, 1e-9, 1e-5, 2e-4, 3e-3, 0.03)


@dataclass
class MadeUp:
    runs: pd.DataFrame
    check: dict[str, Any] = field(default_factory=dict)
    axes: tuple = ()
    sequential: list[SequentialVerdict] = field(default_factory=list)
    claims: list[ClaimsFile] = field(default_factory=list)  # the claims files judged (none: the study's)

    @property
    def seeds_per_variant(self) -> int:
        return int(self.runs.groupby("variant").size().max())


@st.composite
def runs_frames(draw: st.DrawFn) -> MadeUp:
    norms = draw(st.lists(st.sampled_from(BUILT_INS + USER), min_size=2, max_size=5, unique=True))
    setting = draw(st.sampled_from((CPU, STUDY)))
    # A second axis beside the norm: none, the init (the study's against GPT-2's) or the 16-bit precision.
    axis, values = draw(st.sampled_from(((None, (None,)), (None, (None,)), ("model.init", ("study", "gpt2")),
                                         ("precision", ("fp16_mixed", "bf16_mixed")))))  # fmt: skip
    seed_effect = draw(st.sampled_from((0.0, 0.016)))  # the seed's own share (the study's SD), paired out
    base = draw(st.floats(2.5, 7.0, allow_nan=False)).__round__(4)
    spread = draw(st.sampled_from(SPREADS))
    # The jobs ran one after another (a laptop's multirun), all overlapping (SLURM), or each beside the
    # job of the other axis value at its place (a pool of two over `-m axis=a,b`: no job of one value
    # overlaps another of the same value).
    timing = draw(st.sampled_from(("one after another", "at once", "beside the other value")))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    seed_loss = base + rng.normal(0, seed_effect, MAX_SEEDS) if seed_effect else np.full(MAX_SEEDS, base)
    rows = []
    start = 0
    for index, value in enumerate(values):
        if timing == "beside the other value":
            start = index * 0.1  # the second value's jobs start 0.1 s after the first's, each beside its peer
        for norm in norms:
            n_seeds = draw(st.integers(1, MAX_SEEDS))
            seeds = draw(st.sampled_from(("first", "gaps"))) == "first"
            chosen = list(range(n_seeds)) if seeds else sorted(draw(st.sets(st.integers(0, MAX_SEEDS - 1), min_size=1, max_size=n_seeds)))
            offset = draw(st.sampled_from(OFFSETS)) if norm != norms[0] else 0.0
            own = spread if draw(st.booleans()) else draw(st.sampled_from(SPREADS))
            for seed in chosen:
                outcome = draw(st.sampled_from(("finished",) * 8 + ("failed", "diverged", "eval not finite")))
                loss = seed_loss[seed] + offset + (rng.normal(0, own) if own else 0.0)
                label = norm if axis is None else f"{norm} · {value}"
                start += 1
                rows.append({
                    "run_id": f"{label}-s{seed}", "variant": label, "norm": norm, "family": FAMILY[norm], "seed": seed,
                    "outcome": outcome, "test_loss": loss if outcome == "finished" else math.nan,
                    "tokens_per_sec": 1000.0 * (1 + 0.4 * rng.random()), "train_time_s": 100.0 + start,
                    "stopped_at_step": 530.0 if outcome == "diverged" else math.nan,
                    "start_time": pd.Timestamp(0) + pd.Timedelta(seconds=0 if timing == "at once" else 200 * start),
                    "end_time": pd.Timestamp(0) + pd.Timedelta(seconds=150 if timing == "at once" else 200 * start + 150),
                    "dispatch": "fwd=fused bwd=fused",
                    "model.norm_placement": "pre", "model.qk_norm": "False", "model.init": "study", "norm_reference": "",
                    **setting, **({AXIS_PREFIX + "norm": norm, AXIS_PREFIX + axis: value} if axis else {}),
                    **({axis: value} if axis == "model.init" else {}),
                    **({axis: f"{value} (matmul precision high)"} if axis == "precision" else {}),
                })  # fmt: skip
    if setting is STUDY:
        for row in rows:  # a diverged run stops early; the others trained the study's whole budget
            if row["outcome"] in ("failed", "diverged"):  # a NaN evaluation trained through
                row["steps_done"] = 530.0
    runs = pd.DataFrame(rows)
    axes = (Axis("norm", ("norm.norm_type",)), Axis(axis, (AXIS_KEYS[axis],))) if axis else ()
    return MadeUp(runs, axes=axes)


@st.composite
def speed_checks(draw: st.DrawFn, variants: list[str]) -> dict[str, Any]:
    """variants.json of an interleaved speed check: each norm's seconds per step, and whole steps, per round."""
    if not draw(st.booleans()):
        return {}
    rounds = draw(st.integers(2, 40))
    step_rounds = draw(st.sampled_from((2, 3, rounds)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    step_ms = 100.0
    noise = draw(st.sampled_from((0.0, 0.001, 0.02, 0.3)))
    step_noise = draw(st.sampled_from((0.001, 0.01, 0.3)))
    shift = draw(st.sampled_from((0.0, 0.0, 0.05)))  # whole steps moved by more than the norms' cost
    cost = {v: 0.0 if v == "no_norm" else draw(st.sampled_from((1.0, 1.0, 1.02, 3.0, 8.0))) for v in variants}
    norms = {v: list(ms / 1e3 * (1 + rng.normal(0, noise, rounds)).clip(0.1)) for v, ms in cost.items()}
    steps = {v: list((step_ms + ms) * (1 + shift * i) / 1e3 * (1 + rng.normal(0, step_noise, step_rounds)).clip(0.1))
             for i, (v, ms) in enumerate(cost.items())}  # fmt: skip
    check = {"kernel": {"samples_s": norms, "step_s": step_ms / 1e3, "rounds": rounds}, "samples_s": steps,
             "settings": {"variants": list(variants), "rounds": step_rounds}}  # fmt: skip
    if draw(st.booleans()):  # the norms' cost and the rest of a step at the study's eighth claim's sizes
        share_rounds = draw(st.integers(2, 12))
        falls = draw(st.sampled_from((0.5, 0.95, 1.0, 1.3)))  # the share at each next size, relative to the last
        sizes = ("gpt2_small", "gpt2_medium", "gpt2_large")
        rest = {size: list(2.0**i * (1 + rng.normal(0, noise, share_rounds)).clip(0.1)) for i, size in enumerate(sizes)}
        norm_s = {v: {size: list(0.02 * cost[v] * (2 * falls) ** i * (1 + rng.normal(0, noise, share_rounds)).clip(0.1))
                      for i, size in enumerate(sizes)} for v in variants if v != "no_norm"}  # fmt: skip
        samples = {v: {size: [n / (n + r) for n, r in zip(x, rest[size], strict=True)] for size, x in by.items()} for v, by in norm_s.items()}
        check["shares"] = {"sizes": list(sizes), "samples": samples, "norm_s": norm_s, "rest_s": rest}
    return check


@st.composite
def sequential_decisions(draw: st.DrawFn, runs: pd.DataFrame) -> list[SequentialVerdict]:
    """A sequential sweep's decisions (its looks' JSON, as the report reads them), on some of its pairs."""
    if not draw(st.booleans()):
        return []
    most = int(runs.groupby("variant").size().max())
    found = []
    for a, b, _ in comparison_pairs(runs):
        if draw(st.booleans()):
            word = draw(st.sampled_from(list(SequentialWord)))
            look = None if word in (SequentialWord.UNDECIDED, SequentialWord.UNDECIDABLE) else draw(st.integers(1, 4))
            found.append(SequentialVerdict(pair_label(a, b), "test_loss", word, look, most, draw(st.sampled_from((0.01, 0.049))),
                                           draw(st.sampled_from((math.nan, 0.004)))))  # fmt: skip
    return found


@st.composite
def sweeps(draw: st.DrawFn) -> MadeUp:
    made = draw(runs_frames())
    made.check = draw(speed_checks([v for v in dict.fromkeys(made.runs.variant)]))
    made.sequential = draw(sequential_decisions(made.runs))
    return made


# --- claims files: a researcher's own, drawn as YAML and read by the real loader ------------------------

SIZES = ("cpu_small", "gpt2_small", "gpt2_medium", "gpt2_large")  # conf/model options, smallest first (the check times the last three)
CLAIMS_DIR = Path(tempfile.mkdtemp(prefix="made_up_claims_"))
atexit.register(shutil.rmtree, CLAIMS_DIR, ignore_errors=True)  # each worker's drawn files go with it
_drawn = itertools.count()


def _band(draw: st.DrawFn, kind: str, relative: bool, side: int | None = None) -> list[float] | None:
    """A size a claim's words could give: one side of zero for a difference (`side`, where its file's
    table gives one), a band holding zero for an equivalence (a relative metric's in fractions, a loss's in nats)."""
    scale = draw(st.sampled_from((0.001, 0.01, 0.05, 0.2) if relative else (0.001, 0.005, 0.02, 0.1)))
    low, high = sorted(round(scale * draw(st.floats(0.05, 4.0)), 6) for _ in range(2))
    if kind == "equivalence":
        return [-high, high] if draw(st.booleans()) else [-low - 1e-4, high]
    if high == low:
        high = round(low * 1.5 + 1e-4, 6)
    sign = draw(st.sampled_from((-1, 1))) if side is None else side
    band = sorted([sign * low, sign * high])
    return [max(band[0], -0.9), min(band[1], 0.9)] if relative else band


@st.composite
def claims_texts(draw: st.DrawFn, norms: list[str]) -> str:
    """A well-formed claims file of a researcher's own (YAML): every kind, metric and domain, sizes
    or none (a file with no table needs one for a difference or an equivalence), a contrast of two
    pairs' training times or none (where a table gives its figure), a title or none, a
    setting (fixing the model's init through a preset, or naming none) or none, a table or none."""
    lines = []
    if draw(st.booleans()):
        lines.append(f"source: {{title: {draw(st.sampled_from(('my hypotheses', 'DyT beside the norms', 'a lab note')))}}}")
    if draw(st.booleans()):
        preset = ", preset: gpt2_small_study, model_axes: [model.init]" if draw(st.booleans()) else ""
        lines.append(f"setting: {{device: A100, model: GPT-2 small, n_params: 163009536, tokens: 3260190720, precision: fp16{preset}}}")
    table: dict[str, dict[str, float]] = {}
    if draw(st.booleans()):
        table = {n: {"train_time_s": draw(st.integers(5000, 9000)), "test_loss": round(draw(st.floats(3.5, 3.7)), 4)} for n in norms}
        rows = [f"{n}: {{train_time_s: {r['train_time_s']}, test_loss: {r['test_loss']}}}" for n, r in table.items()]
        lines.append(f"table: {{{', '.join(rows)}}}")
    domain = draw(st.sampled_from(("any", "gpu16", "cpu_fp32")))
    if domain != "any":
        spec = "{cuda: true, precision: [fp16_mixed, bf16_mixed]}" if domain == "gpu16" else "{precision: [fp32]}"
        lines += ["domains:", f"  {domain}: {spec}"]
    lines.append("claims:")
    seen: set[str] = set()
    for i in range(draw(st.integers(1, 5))):
        metric = draw(st.sampled_from(("train_time_s", "test_loss", "test_loss", "norm_share", "norm_saving", "divergence")))
        claim_domain = draw(st.sampled_from(("any", domain)))
        parts = []
        for _ in range(draw(st.integers(1, 2))):
            b = draw(st.sampled_from(norms))
            if metric in ("norm_share", "norm_saving"):
                chosen = sorted(draw(st.sets(st.sampled_from(SIZES), min_size=2, max_size=3)), key=SIZES.index)
                if metric == "norm_share":
                    parts.append(f"{{b: {b}, asserts: trend, sizes: [{', '.join(chosen)}]}}")
                    continue
                a = draw(st.sampled_from([n for n in norms if n != b]))  # a saving: b's against a, a trend or at sizes
                if draw(st.booleans()):
                    parts.append(f"{{a: {a}, b: {b}, asserts: trend, sizes: [{', '.join(chosen)}]}}")
                else:
                    parts.append(f"{{a: {a}, b: {b}, asserts: difference, sizes: [{', '.join(chosen)}], size: {_band(draw, 'difference', True)}}}")
            elif metric == "divergence":
                parts.append(f"{{b: {b}, asserts: event}}")
            else:
                a = draw(st.sampled_from([n for n in norms if n != b]))
                kind = draw(st.sampled_from(("difference", "equivalence", "no_worse")))
                if kind == "no_worse":
                    margin = draw(st.sampled_from((0.001, 0.005, 0.02, 0.1)))
                    parts.append(f"{{a: {a}, b: {b}, asserts: no_worse, margin: {margin}}}")
                    continue
                # A difference's size is on its table's side of zero (the format refuses it otherwise).
                figure = (table[b][metric] / table[a][metric] - 1 if metric == "train_time_s" else table[b][metric] - table[a][metric]) if table else None
                minus = ""
                if metric == "train_time_s" and figure is not None and draw(st.booleans()):  # a contrast: (b vs a) - (b' vs a')
                    a2, b2 = draw(st.permutations(norms))[:2]
                    figure -= table[b2][metric] / table[a2][metric] - 1
                    minus = f", minus: [{a2}, {b2}]"
                if kind == "difference" and figure == 0:
                    kind = "equivalence"
                size = _band(draw, kind, metric == "train_time_s", None if figure is None else int(math.copysign(1, figure)))
                parts.append(f"{{a: {a}, b: {b}, asserts: {kind}, size: {size}{minus}}}")
        key = metric + "|".join(sorted(parts))
        if key in seen or len(set(parts)) < len(parts):  # the same claim twice is refused: draw it once
            continue
        seen.add(key)
        lines += [f"  - statement: hypothesis {i + 1} of this file", f"    metric: {metric}", f"    domain: {claim_domain}", "    parts:"]
        lines += [f"      - {p}" for p in parts]
    if lines[-1] == "claims:":  # every drawn claim was a duplicate: one of its own
        lines += ["  - statement: a loss of its own", "    metric: test_loss", "    parts:",
                  f"      - {{a: {norms[0]}, b: {norms[-1]}, asserts: equivalence, size: [-0.05, 0.05]}}"]
    return "\n".join(lines) + "\n"


def claims_file(text: str) -> ClaimsFile:
    """The drawn text as a user's `claims/my_claims_<n>.yaml`, read by the loader every sweep uses."""
    folder = CLAIMS_DIR / str(next(_drawn))
    folder.mkdir()
    path = folder / "my_claims.yaml"
    path.write_text(text)
    return parse(path, [*BUILT_INS, *USER], model_sizes())


@st.composite
def sweeps_with_claims(draw: st.DrawFn) -> MadeUp:
    """A sweep, and beside the study's file a researcher's own drawn for its norms."""
    made = draw(sweeps())
    norms = list(dict.fromkeys(made.runs.norm))
    made.claims = [STUDY_CLAIMS, claims_file(draw(claims_texts(norms)))]
    return made
