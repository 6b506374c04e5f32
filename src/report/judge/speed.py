"""The speed verdict of each pair, from the end-of-sweep speed check (`python -m src.bench variants`);
the measurements, the estimators and the rule are docs/benchmarks.md's ("The sweep's speed check").

The verdict is taken on the step-time change predicted from the norms' own kernels, and the whole
steps only check it (`agreement`): a whole step carries the machine's load, which a norm's own rounds
shed. Every estimate is a 20% trimmed mean, so that a burst of foreign load that spoils a few rounds
is cut off, not averaged in. No sentence is written here: src.report.words.speed writes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
from scipy.stats import median_abs_deviation

from src.stats.inference import ALPHA, TRIM, Interval, trimmed_mean_interval
from src.stats.verdicts import Decision, Estimate, SpeedWord, decide_family, speed_margin, speed_word
from src.tracking.variants import REFERENCE_VARIANT

NO_KERNEL = "none"  # the dispatch of a variant whose norm is the identity
# The fewest whole-step rounds that can check a prediction: below it the 20% trimmed mean cuts no round
# from either tail (floor(0.2 n) = 0), so one burst of load moves the estimate and its spread unchecked,
# and the interval's df (n - 2g - 1) leaves its width to chance (two rounds: df = 1, t = 12.7).
MIN_CHECK_ROUNDS = math.ceil(1 / TRIM)


class Agreement(StrEnum):
    """What the whole-step measurement says of the prediction (src.report.words.speed words each)."""

    AGREE = "agree"  # precise enough to check it, and the intervals overlap
    DISAGREE = "disagree"  # precise enough, and the intervals lie apart: the step moved by more than the norms
    TOO_IMPRECISE = "too imprecise"  # too few rounds, or an interval wider than the margin: no check at all
    NO_STEP_ROUNDS = "no step rounds"  # whole steps were not timed for this pair


def agreement(predicted: Interval, measured: Interval | None, margin: float) -> Agreement:
    """The whole steps' reading of the prediction (the prediction without an interval is its estimate). Below
    MIN_CHECK_ROUNDS rounds, or without an interval, nothing is checked: one burst could make any difference.
    An interval that excludes the prediction contradicts it however wide it is (a wider one only makes that
    harder); one that holds it agrees only where it reaches no further than the speed margin (±log(1 + m))
    from its estimate: a wider one overlaps a prediction a whole margin away, a difference the sweep calls one
    that matters, so its "agree" would hold of any prediction worth telling apart."""
    if measured is None:
        return Agreement.NO_STEP_ROUNDS
    if measured.n < MIN_CHECK_ROUNDS or not (math.isfinite(measured.low) and math.isfinite(measured.high)):
        return Agreement.TOO_IMPRECISE
    finite = math.isfinite(predicted.low) and math.isfinite(predicted.high)
    low, high = (predicted.low, predicted.high) if finite else (predicted.diff, predicted.diff)
    if not (measured.low <= high and low <= measured.high):
        return Agreement.DISAGREE
    wide = max(measured.high - measured.diff, measured.diff - measured.low) > speed_margin(margin)
    return Agreement.TOO_IMPRECISE if wide else Agreement.AGREE


@dataclass(frozen=True)
class SpeedVerdict:
    a: str
    b: str
    predicted: Interval  # log step-time ratio b/a predicted from the norms' own cost
    measured: Interval | None  # log step-time ratio b/a of whole steps (None without step rounds)
    norm_ratio: Interval | None  # log of norm time b/a (None when a's norm does no work)
    decision: Decision | None  # src.stats.verdicts' readings of `predicted` (None: no spread measured)
    margin: float  # relative

    @property
    def verdict(self) -> SpeedWord:
        return speed_word(self.decision) if self.decision else SpeedWord.UNRESOLVED

    @property
    def rounds_needed(self) -> int | None:
        """Kernel rounds that would settle an unresolved pair."""
        return self.decision.settle if self.decision else None

    @property
    def agreement(self) -> Agreement:
        return agreement(self.predicted, self.measured, self.margin)


def decisions(intervals: Sequence[Interval], margin: float) -> list[Decision | None]:
    """Each log-ratio interval's decision at a relative margin (±log(1 + m): the same factor either
    way), faster/slower Holm-adjusted over them all."""
    room = speed_margin(margin)
    return decide_family([Estimate.of(i, room) for i in intervals], ALPHA, TRIM).decisions


def _aligned(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    n = min(len(x), len(y))
    return np.asarray(x[:n], dtype=float), np.asarray(y[:n], dtype=float)


def predicted_rounds(check: Mapping[str, Any], a: str, b: str) -> np.ndarray | None:
    """Per kernel round, the step-time change of b against a predicted from the norms' own cost, as
    a log ratio (None when the check did not time both norms, in a round at least, and a's step)."""
    norms: Mapping[str, list[float]] = (check.get("kernel") or {}).get("samples_s") or {}
    step = step_rounds(check, a)
    if a not in norms or b not in norms or step is None:
        return None
    na, nb = _aligned(norms[a], norms[b])
    if not len(na):  # no round: no estimate to print or judge
        return None
    # A burst can make one round's a-sample longer than a whole step: an extreme round, kept for
    # the trimming to cut (clipped at -99.9%), not dropped as NaN from one side only.
    return np.log(np.maximum(1 + (nb - na) / step[: len(na)], 1e-3))


def step_rounds(check: Mapping[str, Any], a: str = "") -> np.ndarray | None:
    """The whole step each kernel round's norms are divided by: the reference's, timed in that round
    (src.bench.kernels.time_norm_work), so the step's own spread is in every interval read from it.
    A check from before that has one step for all rounds: its `step_s`, else a's median whole step
    (none without `a`)."""
    kernel = check.get("kernel") or {}
    rounds = len(next(iter((kernel.get("samples_s") or {}).values()), []))
    if kernel.get("step_samples_s"):
        step = np.asarray(kernel["step_samples_s"], dtype=float)
        return step if len(step) >= rounds else None
    steps: Mapping[str, list[float]] = check.get("samples_s") or {}
    single = kernel.get("step_s") or (np.median(steps[a]) if len(steps.get(a, [])) else None)
    return None if not single else np.full(rounds, float(single))


def pair_estimate(check: Mapping[str, Any], a: str, b: str) -> Interval | None:
    """The one speed estimate of b against a, wherever the report shows a pair's speed (its verdict,
    the table's column, the figure, the study's table, the sweep run's metrics): the step-time change
    predicted from the norms' own cost, a log ratio with its 95% Tukey–McLaughlin interval over the kernel rounds.
    None when the check did not time both norms."""
    rounds = predicted_rounds(check, a, b)
    return None if rounds is None else trimmed_mean_interval(rounds)


def norm_shares(check: Mapping[str, Any]) -> dict[str, float]:
    """Per variant, its norm's share of a whole step, the one share the report says of it (headline,
    table): the median over the kernel rounds of its norm seconds per step ÷ that round's reference
    step at the kernels' thread count (none where the check timed no step beside its kernels), the
    variants that do no norm work left out."""
    step = step_rounds(check)  # without `a`: none where the check timed no step beside its kernels
    if step is None:
        return {}
    # An identity (no_norm) is timed too: its rounds measure the timing's own floor, not a norm.
    idle = {v for v, d in (check.get("dispatch") or {}).items() if d.get("fwd") == NO_KERNEL}
    norms: Mapping[str, list[float]] = (check.get("kernel") or {}).get("samples_s") or {}
    return {v: float(np.median(np.asarray(x, dtype=float) / step[: len(x)]))
            for v, x in norms.items() if v not in idle and len(x)}  # fmt: skip


def compare_speed(check: Mapping[str, Any], pairs: Sequence[tuple[str, str]], margin: float) -> list[SpeedVerdict]:
    """A verdict per pair (b vs a) from a speed check's per-round samples (`variants.json`)."""
    steps: Mapping[str, list[float]] = check.get("samples_s") or {}
    norms: Mapping[str, list[float]] = (check.get("kernel") or {}).get("samples_s") or {}
    found = []
    for a, b in pairs:
        predicted = pair_estimate(check, a, b)
        if predicted is None:
            continue
        na, nb = _aligned(norms[a], norms[b])
        norm_ratio = trimmed_mean_interval(np.log(nb / na)) if np.all(na > 0) and np.all(nb > 0) and np.median(na) > 1e-6 else None
        measured = None
        if b in steps:
            sa, sb = _aligned(steps[a], steps[b])
            measured = trimmed_mean_interval(np.log(sb / sa))
        found.append((a, b, predicted, measured, norm_ratio))
    decided = decisions([f[2] for f in found], margin)
    return [SpeedVerdict(*f, d, margin) for f, d in zip(found, decided, strict=True)]


def spread(samples: Sequence[float]) -> float:
    """Round-to-round spread of one variant's samples: median absolute deviation ÷ median."""
    x = np.asarray(samples, dtype=float)
    med = float(np.median(x)) if len(x) > 1 else 0.0
    return float(median_abs_deviation(x) / med) if med else math.nan


def timed_variants(check: Mapping[str, Any]) -> list[str]:
    """The variants the check timed with the norms' kernels (none: no check, or an older one that timed
    whole steps only)."""
    return list((check.get("settings") or {}).get("variants") or []) if check.get("kernel") else []


def check_reference(check: Mapping[str, Any]) -> str | None:
    """The variant the check's header describes and the table's speed column is relative to."""
    variants = timed_variants(check)
    return REFERENCE_VARIANT if REFERENCE_VARIANT in variants else (variants[0] if variants else None)
