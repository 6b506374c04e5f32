"""What this sweep measured of one claim part's effect, and whether its setting is the claim's domain.

An `Effect` is an interval in the units it was measured in (a log step-time ratio per kernel round,
relative tokens/s per seed, or the study's own units), with the map to the study's units; which
evidence each metric reads is docs/reproducing.md, "How a claim gets its word". The interval is kept
with its `se` and `df`, so the section widens it for its family of claims (src/stats/verdicts.py).
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from src.report.judge.pairs import compare_one, seed_values
from src.report.judge.speed import predicted_rounds
from src.report.read.claims import FP16, HALF_PRECISION, SPEED, ClaimsFile, Domain, Part
from src.report.read.timing import most_at_once
from src.stats.inference import TRIM, Interval, at_level, paired_t, trimmed_mean_interval
from src.stats.verdicts import Estimate, speed_margin
from src.tracking.tags import DEVICE_TAG

LOG_TIME, TOKENS, DIRECT = "log step-time ratio", "relative tokens/s", "direct"  # an Effect's own units


class Per(StrEnum):
    """What one more sample of an effect is: its reason's noun ("moved alike over 12 kernel rounds")."""

    SEEDS = "seeds"
    KERNEL_ROUNDS = "kernel rounds"  # the speed check's
    SHARE_ROUNDS = "share rounds"  # the speed check's rounds at each model size


class Timing(StrEnum):
    """How a speed figure was timed, which decides whether it measures the norm at all."""

    CHECK = "check"  # the speed check's interleaved rounds: the variants in turn in one process
    OWN_DEVICE = "own device"  # the jobs, each on its own GPU, as the study timed its runs
    # The jobs' own times on a CPU time the machine's load as much as the norm (the design notes' pitfalls:
    # the same machine gave 566 and 1,485 tokens/s minutes apart), whether one after another or at once
    # (src.report.words.jobs says which).
    ONE_AFTER_ANOTHER = "one after another"
    AT_ONCE = "at once"

    @property
    def measured(self) -> bool:
        return self in (Timing.CHECK, Timing.OWN_DEVICE)


def jobs_timing(runs: pd.DataFrame, among: pd.DataFrame | None = None) -> Timing:
    """How the jobs' own times were taken: on GPUs each job had its device; elsewhere, at once where
    one of them overlapped another job of `among` (all the runs read; src.report.read.timing), else
    one after another."""
    if len(runs) and set(runs.device_type.dropna().astype(str)) == {"cuda"}:
        return Timing.OWN_DEVICE
    return Timing.AT_ONCE if most_at_once(runs, among) > 1 else Timing.ONE_AFTER_ANOTHER


@dataclass(frozen=True)
class Effect:
    interval: Interval  # in `units`
    units: str  # LOG_TIME, TOKENS or DIRECT (already the study's units)
    per: Per  # what one more sample is
    sizes: tuple[int, int] = (0, 0)  # the runs of a and of b, where the pair fell back to Welch (unpaired)
    timing: Timing | None = None  # a speed figure: how it was timed (None: not a time)
    device: str = ""  # where a share check timed it (its CPU or GPU, as the run's device tag names it)

    @property
    def measured(self) -> bool:
        """Whether the figure measures what it names: a time taken where another load moves it does not,
        and never decides a word (src.report.judge.study.part_finding)."""
        return self.timing is None or self.timing.measured

    def to_study(self, x: float) -> float:
        if self.units == LOG_TIME:
            return math.expm1(x)
        if self.units == TOKENS:  # more tokens/s is less time; at -100% tokens/s the time is unbounded
            return 1 / (1 + x) - 1 if x > -1 else math.inf
        return x

    @property
    def diff(self) -> float:
        return self.to_study(self.interval.diff)

    @property
    def has_interval(self) -> bool:
        return self.interval.se == 0 or (math.isfinite(self.interval.low) and math.isfinite(self.interval.high))

    def at(self, alpha: float) -> tuple[float, float]:
        """The (1 - alpha) interval in the study's units, low <= high."""
        low, high = (self.to_study(x) for x in at_level(self.interval, alpha))
        return (min(low, high), max(low, high)) if not (math.isnan(low) or math.isnan(high)) else (math.nan, math.nan)

    @property
    def spread(self) -> bool:
        """False when every seed (or round) moved by exactly the same amount: no interval to read."""
        return self.interval.se != 0

    @property
    def trim(self) -> float:
        return TRIM if self.interval.test == "tukey_mclaughlin" else 0.0

    def estimate(self, margin: float) -> Estimate:
        """What src.stats.verdicts judges, in this effect's own units (a relative `margin` of
        training time turned into them)."""
        return Estimate.of(self.interval, speed_margin(margin) if self.units == LOG_TIME else margin)


def from_check(check: Mapping[str, Any], part: Part, labels: Mapping[str, str | None]) -> Effect | None:
    """The speed check's effect for a speed part (None when the check did not time its norms)."""
    first = predicted_rounds(check, str(labels[str(part.a)]), str(labels[part.b]))
    if first is None:
        return None
    if part.minus is None:
        return Effect(trimmed_mean_interval(first), LOG_TIME, Per.KERNEL_ROUNDS, timing=Timing.CHECK)
    second = predicted_rounds(check, str(labels[part.minus[0]]), str(labels[part.minus[1]]))
    if second is None:
        return None
    n = min(len(first), len(second))
    rounds = np.expm1(first[:n]) - np.expm1(second[:n])
    return Effect(trimmed_mean_interval(rounds), DIRECT, Per.KERNEL_ROUNDS, timing=Timing.CHECK)


def _time_change(runs: pd.DataFrame, a: str, b: str) -> pd.Series:
    """Per seed, b's training time against a's as tokens/s measures it: tokens/s_a / tokens/s_b - 1."""
    va, vb = seed_values(runs, a, "tokens_per_sec"), seed_values(runs, b, "tokens_per_sec")
    return (va / vb - 1).dropna()


def from_runs(runs: pd.DataFrame, part: Part, metric: str, labels: Mapping[str, str | None], margin: float) -> Effect | None:
    """The paired per-run effect of a part (None when a side has no finished run)."""
    a, b = str(labels[str(part.a)]), str(labels[part.b])
    read = [a, b, *(str(labels[v]) for v in part.minus or ())]
    timing = jobs_timing(runs[runs.variant.isin(read)], runs) if metric == SPEED else None
    if part.minus is not None:  # a contrast of two pairs, seed by seed (speed only)
        first, second = _time_change(runs, a, b), _time_change(runs, *read[2:])
        both = first.index.intersection(second.index)
        if not len(both):
            return None
        d = (first.loc[both] - second.loc[both]).to_numpy()
        return Effect(paired_t(np.zeros(len(d)), d), DIRECT, Per.SEEDS, timing=timing)
    key = "tokens_per_sec" if metric == SPEED else "test_loss"
    found = compare_one(runs, a, b, key, margin)
    if not (found.n_a and found.n_b):
        return None
    return Effect(found.primary, TOKENS if metric == SPEED else DIRECT, Per.SEEDS, (found.n_a, found.n_b), timing)


# --- the claim's domain ---------------------------------------------------------------------------


def precision_name(column: pd.Series) -> set[str]:
    """The precision config of each run (`fp16_mixed (matmul precision high)` -> fp16_mixed)."""
    return {str(v).split(" ", 1)[0] for v in column.dropna()}


class DomainFact(str):
    """One way a setting leaves a claim's domain, as data: the fact (`CPU run`, `precision fp32`)
    and why it leaves the domain; as a string, the two together (`CPU run: the study's figure ...`)."""

    fact: str

    def __new__(cls, fact: str, why: str = "") -> DomainFact:
        out = super().__new__(cls, fact + why)
        out.fact = fact
        return out


def precision_inside(domain: Domain, runs: pd.DataFrame) -> bool:
    """Every run in a precision the claim's figure holds in: one rule, whether the sweep varied the
    precision or not (fp16 and bf16 autocast alike where the domain is 16-bit autocast)."""
    names = precision_name(runs.precision)
    return not domain.precision or (bool(names) and names <= set(domain.precision))


def outside(domain: Domain, runs: pd.DataFrame, source: ClaimsFile) -> list[DomainFact]:
    """Why the runs' setting is outside the claim's domain (its file's `source`), one fact each ([] when inside)."""
    why = []
    setting = source.setting  # the format refuses a params or tokens domain in a file without one
    factor = setting.scale_factor if setting else math.nan
    noun = source.source_noun  # who stated the figure: the study, a source, or the claim itself
    whose = f"{noun}'s"
    kinds = sorted(set(runs.device_type.dropna().astype(str))) or ["unrecorded"]
    if domain.cuda and kinds != ["cuda"]:
        why.append(DomainFact(f"{'/'.join(k.upper() if k == 'cpu' else k for k in kinds)} run", f": {whose} figure comes from its CUDA kernels"))
    params = runs.n_params.dropna()
    if domain.params and setting is not None:
        if not len(params):
            why.append(DomainFact("the runs record no parameter count"))
        elif not setting.n_params / factor <= params.max() <= setting.n_params * factor:
            why.append(DomainFact(f"{int(params.max()):,} parameters", f", not within {factor:g}× of {whose} {setting.n_params:,}"))
    if domain.tokens and setting is not None:
        tokens, study = runs.tokens.dropna(), setting.tokens / setting.n_params
        if not (len(tokens) and len(params)):
            why.append(DomainFact("the runs record no token count"))
        elif tokens.max() / params.max() < study / factor:
            why.append(DomainFact(f"{tokens.max() / params.max():.3g} tokens per parameter", f", below {whose} {study:.3g} / {factor:g}"))
    if domain.gpu and kinds == ["cuda"]:
        names = sorted(set(runs.device_name.dropna().astype(str)) - {""}) or ["an unrecorded GPU"]
        if not all(domain.gpu in n for n in names):
            why.append(DomainFact(f"{'/'.join(names)} run", f": {noun} timed {domain.gpu}s, and a norm's share of a step moves with "
                                  "the chip's bandwidth-to-compute ratio"))  # fmt: skip
    if not precision_inside(domain, runs):
        shown = "/".join(sorted(precision_name(runs.precision))) or "unrecorded"
        if domain.precision == FP16:  # the study's NaN came from fp16's narrow range, which bf16 and fp32 do not share
            held = "fp16 autocast (bf16 and fp32 keep fp32's exponent range)"
        else:
            held = "16-bit autocast" if set(domain.precision) == set(HALF_PRECISION) else " or ".join(domain.precision)
        why.append(DomainFact(f"precision {shown}", f", not {whose} {held}"))
    return why


def processes(domain: Domain, runs: pd.DataFrame, source: ClaimsFile) -> tuple[int, ...]:
    """What differs from the source's setting inside a speed domain without leaving it: the process
    counts, whose all-reduce was part of its step time (() where they are its own, or it has no setting)."""
    counts = sorted({int(d) for d in runs.devices.dropna()}) if domain.gpu and source.setting else []
    return () if not counts or counts == [source.setting.devices] else tuple(counts)


def seed_spread(finished: pd.DataFrame) -> tuple[float, int]:
    """The pooled SD over seeds of one variant's test loss (of the `finished` runs), and its degrees of freedom."""
    loss = finished.test_loss.astype(float).groupby(finished.variant)
    df = int((loss.count() - 1).clip(lower=0).sum())
    return (math.sqrt(float((loss.var() * (loss.count() - 1)).sum()) / df), df) if df else (math.nan, 0)


# --- a trend: a norm's share of a step over model sizes ---------------------------------------------------


def _timed(check: Mapping[str, Any], part: Part) -> dict[str, tuple[np.ndarray, np.ndarray | float]] | None:
    """Per model size of the part, per round, its value and the step it is a share of (None unless timed
    at every size, in two rounds at least): a trend of b alone, its norm's share of a step (of 1); a part
    of b against a, b's saving against a (a's norm seconds less b's, per the check's rows of tokens) and
    a's whole step (the rest of the step + a's norm), signed (below zero: b costs more than a)."""
    shares = check.get("shares") or {}
    norm_s, rest_s = shares.get("norm_s") or {}, shares.get("rest_s") or {}

    def series(size: str) -> list[Sequence[float]]:  # the rounds timed at `size`, one list of each thing timed
        if part.a is None:
            return [((shares.get("samples") or {}).get(part.b) or {}).get(size) or ()]
        return [*((norm_s.get(v) or {}).get(size) or () for v in (part.a, part.b)), rest_s.get(size) or ()]

    found = {size: series(size) for size in part.sizes}
    if not found or not all(len(x) >= 2 for timed in found.values() for x in timed):
        return None
    out: dict[str, tuple[np.ndarray, np.ndarray | float]] = {}
    for size, timed in found.items():
        n = min(map(len, timed))
        x = [np.asarray(t[:n], dtype=float) for t in timed]
        out[size] = (x[0], 1.0) if part.a is None else (x[0] - x[1], x[2] + x[0])
    return out


def shares_timed(check: Mapping[str, Any], part: Part) -> bool:
    """Whether the share check timed a part: its norm (a saving: both norms) at each of its sizes."""
    return _timed(check, part) is not None


def share_effect(check: Mapping[str, Any], part: Part) -> Effect | None:
    """A part timed by the share rounds (sizes of one round timed together, so a burst of load lands
    on all), its trimmed-mean interval over rounds:

    - a norm's trend: per round, the log of the share at the largest size over the smallest's; in the
      claim's units a relative change of the share (-0.4: the share falls by 40%);
    - a saving's trend: per round, the saving at the largest size less the smallest's, over the
      smallest's saving (its median over rounds, a magnitude): +3.0 is a saving 4× the first size's, and
      a saving below zero that grows more negative (b costs more as the model grows) reads below zero;
    - a saving at sizes (a difference): per round, the log of b's step over a's at the largest of them,
      where b's step is a's less the saving; in the claim's units the relative change of the step."""
    timed = _timed(check, part)
    if timed is None:
        return None
    (first, _), (last, step) = timed[part.sizes[0]], timed[part.sizes[-1]]
    n = min(len(first), len(last))
    if part.a is None:
        rounds, units = np.log(last[:n] / first[:n]), LOG_TIME
    elif part.kind.over_sizes:
        scale = abs(float(np.median(first)))
        if not scale:
            return None
        rounds, units = (last[:n] - first[:n]) / scale, DIRECT
    else:
        rounds, units = np.log1p(-last / step), LOG_TIME
    device = str((check.get("environment") or {}).get(DEVICE_TAG) or "")
    return Effect(trimmed_mean_interval(rounds), units, Per.SHARE_ROUNDS, timing=Timing.CHECK, device=device)


def share_levels(check: Mapping[str, Any], part: Part, alpha: float) -> tuple[tuple[str, float, float, float], ...]:
    """Per model size of a trend, its norm's share of a step with its (1 - alpha) interval over rounds."""
    out = []
    for size, (x, step) in (_timed(check, part) or {}).items():
        interval = trimmed_mean_interval(x / step)
        low, high = at_level(interval, alpha)
        out.append((size, float(interval.diff), float(low), float(high)))
    return tuple(out)
