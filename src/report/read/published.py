"""The published study this project reproduces, as data: its table, its setting and its claims.

This module is the one owner of what the study found. The report's "Against the published study"
section judges the claims from here (src.report.judge.study) and writes this sweep's figures beside
them (src.report.words.study); the figures a claim quotes are computed from `TABLE`, never typed twice. Each claim is a
hypothesis of its own: per part, the effect it speaks of (a pair and a metric, or a contrast of two
pairs), what it asserts (a difference, an equivalence, an event), the size its words give, and the
`Domain` in which the study's figure can be expected (device and kernels, scale, precision). How a
sweep's interval is read against it is src/stats/verdicts.py. The study's configuration (model, data,
optimizer, schedule, precision) is the `experiment=gpt2_small_study` preset, `PRESET`: a swept axis
is compared with the study where its value equals the preset's.

Torch-free and read-only: nothing here touches a store or a file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from src.stats.verdicts import Asserts

TABLE_SOURCE = (
    "the study's post (its results table: the `8xa100m40-rmsnorm-1` … `-4` runs and its no-norm run, one seed "
    "per variant)"
)
SETTING_SOURCE = (
    "the author's published run configs (the `8xa100m40-stacked-interventions` runs' train.json/model.json) and "
    "the training script's defaults"
)
PRESET = "gpt2_small_study"  # conf/experiment/: the study's run configuration, line by line
# The model axes the study fixed (pre-norm, no QK-norm, its script's init: src/core/schema.py ModelSchema):
# a run off them is another model than the study's, whether its sweep varied them or not.
MODEL_AXES = ("model.norm_placement", "model.qk_norm", "model.init")
# What the study's training code does that a config can change (docs/reproducing.md): a sweep's values
# are named beside the study's (the preset's) in its setting lines.
STUDY_CODE = ("model.init", "optim.decay_norm_and_bias", "optim.betas", "optim.min_lr_ratio")


@dataclass(frozen=True)
class Published:
    """One row of the study's table (NaN where the study has no number)."""

    train_time_s: float
    tokens_per_sec: float
    test_loss: float
    nan_from_step: int | None = None  # the step by which the loss was NaN (the study's no-norm run)


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

SPEED, LOSS, STABILITY = "train_time_s", "test_loss", "divergence"  # what a claim measures
DIFFERENCE, EQUIVALENCE, EVENT = Asserts.DIFFERENCE, Asserts.EQUIVALENCE, Asserts.EVENT  # what a part asserts
# How far from the study's setting its figure can still be expected: a model within this factor of
# its parameters, trained on at least its tokens per parameter divided by it. A norm's share of a
# step, and a loss gap at the end of training, both move with width and with how far training got.
SCALE_FACTOR = 2.0
HALF_PRECISION = ("fp16_mixed", "bf16_mixed")  # 16-bit autocast: a norm's kernels move 2 bytes a value either way
FP16 = ("fp16_mixed",)  # the study's own: bf16 keeps fp32's exponent range, so fp16's overflow is not in it
TYPICAL_COLLAPSE = 100  # the study's words: without a norm, training typically collapses within about 100 steps


@dataclass(frozen=True)
class Domain:
    """The setting in which the study's figure can be expected; outside it a claim is *not applicable
    here* (the sweep's own figure is still shown)."""

    cuda: bool = False  # timed or computed by the study's CUDA kernels
    gpu: str = ""  # the GPU the study timed, as a run's device name spells it ("" any)
    params: bool = True  # the model within SCALE_FACTOR of the study's parameters
    tokens: bool = False  # at least the study's tokens per parameter / SCALE_FACTOR
    precision: tuple[str, ...] = ()  # the precisions the figure holds in (() any)


# Kernel time at the study's shapes and dtypes on its chip: a norm's share of a step moves with the
# chip's bandwidth-to-compute ratio. Its process count (SETTING.devices) is said where it differs.
SPEED_DOMAIN = Domain(cuda=True, gpu="A100", precision=HALF_PRECISION)
# RMSNorm against LayerNorm is the model's math: any device or precision, at the study's scale.
MATH_LOSS_DOMAIN = Domain(tokens=True)
# Hand-rolled against built-in is the same math: an edge can only come from the kernels' numerics in
# 16-bit autocast on CUDA, at the end of a full-length run.
KERNEL_LOSS_DOMAIN = Domain(cuda=True, tokens=True, precision=HALF_PRECISION)
# The study's no-norm loss was NaN by step 530 in fp16 autocast: fp16 alone (a run that trains through
# must also reach step 530 to say it did not diverge: src.report.judge.study).
DIVERGENCE_DOMAIN = Domain(precision=FP16)


@dataclass(frozen=True)
class Part:
    """One effect a claim speaks of: b against a (or, with `minus`, that effect less another pair's),
    what it asserts of it and the size the study's words give (signed, low <= high; for an equivalence
    the band around zero). The band a sweep is read against is that size joined with the study's own
    figure for this part (`band`); without a size, the figure alone."""

    a: str | None  # None: a claim about b alone (no_norm's divergence)
    b: str
    asserts: str  # DIFFERENCE, EQUIVALENCE or EVENT
    label: str = ""
    size: tuple[float, float] | None = None
    minus: tuple[str, str] | None = None  # (a', b'): the effect is (b vs a) - (b' vs a')

    def published(self, metric: str) -> float:
        """The study's figure for this part: b / a - 1 of training time, b - a of test loss, or the
        step b's loss went NaN."""
        row_b = TABLE[self.b]
        if metric == STABILITY:
            return float(row_b.nan_from_step) if row_b.nan_from_step is not None else math.nan
        value = table_effect(metric, str(self.a), self.b)
        return value - table_effect(metric, *self.minus) if self.minus else value

    def band(self, metric: str) -> tuple[float, float]:
        figure = self.published(metric)
        low, high = self.size if self.size else (figure, figure)
        return min(low, figure), max(high, figure)

    def sign(self, metric: str) -> int:
        """The side of zero the study claims (0 for an equivalence)."""
        return 0 if self.asserts == EQUIVALENCE else int(math.copysign(1, self.published(metric)))

    def variants(self) -> tuple[str, ...]:
        return tuple(v for v in (self.a, self.b, *(self.minus or ())) if v is not None)


def table_effect(metric: str, a: str, b: str) -> float:
    """b against a in the study's table: b / a - 1 of training time, b - a of test loss."""
    if metric == SPEED:
        return TABLE[b].train_time_s / TABLE[a].train_time_s - 1
    return TABLE[b].test_loss - TABLE[a].test_loss


@dataclass(frozen=True)
class StudyClaim:
    number: int
    statement: str  # as the study put it
    metric: str  # SPEED, LOSS or STABILITY
    parts: tuple[Part, ...]
    domain: Domain
    words: str = ""  # how the size was read from the study's words
    note: str = ""  # what the study itself said of it

    def variants(self) -> set[str]:
        return {v for p in self.parts for v in p.variants()}


# The study's words give a size to the precision they are written in: "~10–11%" spans 9.5–11.5%,
# "~2.5%" 2.45–2.55%, "~0.5%" at most 0.55%, "0.001–0.006" at most 0.0065; each part's band also
# holds its own figure from the table (claim 1's RMSNorm is −9.25%).
_LN, _RMS = ("hand_layernorm", "torch_layernorm"), ("hand_rmsnorm", "torch_rmsnorm")
CLAIMS: tuple[StudyClaim, ...] = (
    StudyClaim(1, "built-in kernels cut training time ~10–11% against hand-rolled ones", SPEED,
          (Part(*_LN, DIFFERENCE, "LayerNorm", (-0.115, -0.095)), Part(*_RMS, DIFFERENCE, "RMSNorm", (-0.115, -0.095))),
          SPEED_DOMAIN, words="~10–11% read as 9.5–11.5%"),
    StudyClaim(2, "hand-rolled RMSNorm is ~2.5% faster than hand-rolled LayerNorm", SPEED,
          (Part("hand_layernorm", "hand_rmsnorm", DIFFERENCE, size=(-0.0255, -0.0245)),),
          SPEED_DOMAIN, words="~2.5% read as 2.45–2.55%"),
    StudyClaim(3, "the two built-ins differ by ~0.5%: the hand-rolled RMSNorm's edge shrank", SPEED,
          (Part("torch_layernorm", "torch_rmsnorm", EQUIVALENCE, "built-ins", (-0.0055, 0.0055)),
           Part("torch_layernorm", "torch_rmsnorm", DIFFERENCE, "shrank", minus=("hand_layernorm", "hand_rmsnorm"))),
          SPEED_DOMAIN, words="~0.5% read as at most 0.55%; shrank: the built-ins' gap less the hand-rolled gap, above zero"),
    StudyClaim(4, "RMSNorm's test loss is within ~0.001–0.006 of LayerNorm's", LOSS,
          (Part("hand_layernorm", "hand_rmsnorm", EQUIVALENCE, "hand-rolled", (-0.0065, 0.0065)),
           Part("torch_layernorm", "torch_rmsnorm", EQUIVALENCE, "built-in", (-0.0065, 0.0065))),
          MATH_LOSS_DOMAIN, words="0.001–0.006 read as at most 0.0065"),
    StudyClaim(5, "the built-ins' test loss is slightly better than the hand-rolled ones'", LOSS,
          (Part(*_LN, DIFFERENCE, "LayerNorm"), Part(*_RMS, DIFFERENCE, "RMSNorm")),
          KERNEL_LOSS_DOMAIN, words="slightly: no size given; the study's own gap is the size",
          note="left open by the study as possibly seed noise"),
    StudyClaim(6, "without normalization training diverges", STABILITY, (Part(None, "no_norm", EVENT),), DIVERGENCE_DOMAIN),
    StudyClaim(7, "the kernel effect completely overshadows the norm-math effect: built-in LayerNorm beats hand-rolled RMSNorm", SPEED,
          (Part("hand_rmsnorm", "torch_layernorm", DIFFERENCE),),
          SPEED_DOMAIN, words="completely overshadowing: no size given; the study's own gap is the size",
          note="the study's headline"),
)  # fmt: skip
STUDY_VARIANTS = tuple(TABLE)  # the study's five, in its table's order
