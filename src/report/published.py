"""The published study this project reproduces, as data: its table, its setting and its six claims.

This module is the one owner of what the study found. The report's "Against the published study"
section (src.report.against_study) reads the claims from here and sets this sweep's figures beside
them; the figures a claim quotes are computed from `TABLE`, never typed twice. The study's
configuration (model, data, optimizer, schedule, precision) is the `experiment=gpt2_small_study`
preset, `PRESET`: a swept axis is compared with the study where its value equals the preset's.

Torch-free and read-only: nothing here touches a store or a file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SOURCE = (
    "the published study's results table and run configuration (GPT-2 small, the "
    "`8xa100m40-stacked-interventions` runs' train.json/model.json and the training script's defaults), "
    "one seed per variant, as transcribed in issue 35"
)
PRESET = "gpt2_small_study"  # conf/experiment/: the study's run configuration, line by line
# The model axes the study fixed (pre-norm, no QK-norm: src/core/schema.py ModelSchema): a run off them is
# another model than the study's, whether its sweep varied them or not.
MODEL_AXES = ("model.norm_placement", "model.qk_norm")


@dataclass(frozen=True)
class Published:
    """One row of the study's table (NaN where the study has no number)."""

    train_time_s: float
    tokens_per_sec: float
    test_loss: float
    nan_from_step: int | None = None  # the step the loss went NaN (the study's no-norm run)


TABLE: dict[str, Published] = {  # norm key (conf/norm/<key>.yaml) -> the study's row
    "hand_layernorm": Published(9_358, 348_364, 3.595336),
    "torch_layernorm": Published(8_324, 391_659, 3.571158),
    "hand_rmsnorm": Published(9_134, 356_899, 3.601292),
    "torch_rmsnorm": Published(8_289, 393_294, 3.572383),
    "no_norm": Published(math.nan, math.nan, math.nan, nan_from_step=530),
}


@dataclass(frozen=True)
class Setting:
    """Where a result was made: the few facts that decide how far a comparison carries."""

    device: str
    devices: int
    cuda: bool
    model: str
    n_params: int
    tokens: int
    precision: str
    seeds: int


SETTING = Setting(
    device="NVIDIA A100 40 GB",
    devices=8,
    cuda=True,
    model="GPT-2 small: 12 layers × 768, context 1024",
    n_params=163_009_536,  # with LayerNorm, untied head
    tokens=3_260_190_720,  # 20 per parameter
    precision="fp16 autocast, TF32 matmuls",
    seeds=1,
)

# How a claim is tested on a pair (b against a):
LOWER = "lower"  # b's value is below a's (a faster step, a lower loss)
EQUIVALENT = "equivalent"  # b and a are equivalent within the report's margin
DIVERGES = "diverges"  # b (no normalization) diverges where the normalized variants train on
SPEED, LOSS, STABILITY = "train_time_s", "test_loss", "divergence"  # what a claim measures


@dataclass(frozen=True)
class Part:
    """One pair a claim speaks of: b against a, with a label (`LayerNorm`) when the claim has several."""

    a: str | None  # None: a claim about b alone (no_norm's divergence)
    b: str
    label: str = ""

    def published(self, metric: str) -> float:
        """The study's figure for this pair: b / a - 1 of training time, b - a of test loss, or the
        step b's loss went NaN."""
        row_b = TABLE[self.b]
        if metric == STABILITY:
            return float(row_b.nan_from_step) if row_b.nan_from_step is not None else math.nan
        row_a = TABLE[str(self.a)]
        if metric == SPEED:
            return row_b.train_time_s / row_a.train_time_s - 1
        return row_b.test_loss - row_a.test_loss


@dataclass(frozen=True)
class Claim:
    number: int
    statement: str  # as the study put it
    metric: str  # SPEED, LOSS or STABILITY
    test: str  # LOWER, EQUIVALENT or DIVERGES
    parts: tuple[Part, ...]
    note: str = ""  # what the study itself said of it

    def variants(self) -> set[str]:
        return {v for p in self.parts for v in (p.a, p.b) if v is not None}


CLAIMS: tuple[Claim, ...] = (
    Claim(1, "built-in kernels cut training time ~10–11% against hand-rolled ones", SPEED, LOWER,
          (Part("hand_layernorm", "torch_layernorm", "LayerNorm"), Part("hand_rmsnorm", "torch_rmsnorm", "RMSNorm"))),
    Claim(2, "hand-rolled RMSNorm is ~2.5% faster than hand-rolled LayerNorm", SPEED, LOWER,
          (Part("hand_layernorm", "hand_rmsnorm"),)),
    Claim(3, "the two built-ins differ by ~0.5%", SPEED, EQUIVALENT, (Part("torch_layernorm", "torch_rmsnorm"),)),
    Claim(4, "RMSNorm's test loss is within ~0.001–0.006 of LayerNorm's", LOSS, EQUIVALENT,
          (Part("hand_layernorm", "hand_rmsnorm", "hand-rolled"), Part("torch_layernorm", "torch_rmsnorm", "built-in"))),
    Claim(5, "the built-ins' test loss is slightly better than the hand-rolled ones'", LOSS, LOWER,
          (Part("hand_layernorm", "torch_layernorm", "LayerNorm"), Part("hand_rmsnorm", "torch_rmsnorm", "RMSNorm")),
          note="left open by the study as possibly seed noise"),
    Claim(6, "without normalization training diverges", STABILITY, DIVERGES, (Part(None, "no_norm"),)),
)  # fmt: skip
STUDY_VARIANTS = tuple(TABLE)  # the study's five, in its table's order
