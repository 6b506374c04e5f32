"""The speed verdict of each pair, from the end-of-sweep speed check (`python -m src.bench variants`).

Two measurements, taken in one process with the variants interleaved round by round:

- **kernel level**: each variant's norm forward+backward at the run's shapes, as norm seconds per
  training step (calls per step × seconds per call). Per round, the predicted step-time change of
  b against a is log(1 + (norm_b - norm_a) / step_a), with step_a a's median whole step;
- **step level**: whole training steps, per round log(step_b / step_a): the check of the prediction.

Each is summarised by its 20% trimmed mean with Yuen's interval (`stats.trimmed_mean_interval`): a
burst of foreign load that spoils a few rounds is cut off, not averaged in. The pair's verdict is
taken on the prediction, by the rule of src/stats/verdicts.py: **equivalent within ±margin** (TOST
on the per-round log ratios, margin `report.margin.speed`), else **faster/slower** (Holm over the
section's pairs), else **unresolved**, with the rounds that would settle it. The two levels **agree** when their
intervals overlap; where they do not, the step level was too noisy to use when its interval is the
wider (a norm of a few ms cannot move a step by more than its own cost), else the line says the
whole step moved by other than the norms' own cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from src.stats.inference import ALPHA, TRIM, Interval, trimmed_mean_interval
from src.stats.pairs import pair_label
from src.stats.verdicts import (
    Decision,
    Estimate,
    SpeedWord,
    decide_family,
    equivalent_text,
    settle_text,
    speed_margin,
    speed_word,
)

NO_KERNEL = "none"  # the dispatch of a variant whose norm is the identity


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
    def tost_p(self) -> float:
        return self.decision.tost_p if self.decision else math.nan

    @property
    def agree(self) -> bool | None:
        m, p = self.measured, self.predicted
        if m is None or not (math.isfinite(m.low) and math.isfinite(p.low)):
            return None
        return m.low <= p.high and p.low <= m.high

    def verdict_text(self) -> str:
        word = self.verdict
        if word == SpeedWord.EQUIVALENT and self.decision is not None:
            # Beside the word, the interval that decided it (TOST's); the estimate after it is the 95% one shown everywhere.
            if self.decision.remains:
                return equivalent_text(f"{self.margin:.0%}", decided_text(self.predicted, self.decision))
            d = self.decision
            return f"{equivalent_text(f'{self.margin:.0%}')} (TOST's {d.level:.0%} interval [{math.expm1(d.low):+.1%}, {math.expm1(d.high):+.1%}])"
        if word == SpeedWord.UNRESOLVED and self.rounds_needed:
            return f"{word}: {settle_text(self.rounds_needed, 'kernel rounds')}"
        return str(word)


def step_time_text(i: Interval) -> str:
    """A log step-time ratio as the report prints it: `+0.3% [+0.2%, +0.3%]` (b's step against a's)."""
    return f"{math.expm1(i.diff):+.1%} [{math.expm1(i.low):+.1%}, {math.expm1(i.high):+.1%}]"


def decided_text(i: Interval, d: Decision | None) -> str:
    """The estimate with the interval its word was read from (TOST's 90% one for an equivalence)."""
    if d is None or not d.spread:
        return f"{math.expm1(i.diff):+.1%} (every round alike: no interval)" if d is not None else step_time_text(i)
    level = "" if round(d.level, 6) == 0.95 else f" ({d.level:.0%} interval)"
    return f"{math.expm1(i.diff):+.1%} [{math.expm1(d.low):+.1%}, {math.expm1(d.high):+.1%}]{level}"


def decisions(intervals: Sequence[Interval], margin: float) -> list[Decision | None]:
    """Each log-ratio interval's decision at a relative margin (±log(1 + m): the same factor either
    way), faster/slower Holm-adjusted over them all."""
    room = speed_margin(margin)
    return decide_family([Estimate(i.diff, i.se, i.df, i.sd, i.n, i.p_value, room) for i in intervals], ALPHA, TRIM)


def _aligned(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    n = min(len(x), len(y))
    return np.asarray(x[:n], dtype=float), np.asarray(y[:n], dtype=float)


def predicted_rounds(check: Mapping[str, Any], a: str, b: str) -> np.ndarray | None:
    """Per kernel round, the step-time change of b against a predicted from the norms' own cost, as
    a log ratio (None when the check did not time both norms and a's step)."""
    steps: Mapping[str, list[float]] = check.get("samples_s") or {}
    norms: Mapping[str, list[float]] = (check.get("kernel") or {}).get("samples_s") or {}
    if a not in norms or b not in norms or a not in steps:
        return None
    # A whole step at the kernels' thread count, when measured (the reference's); else a's.
    step_a = float((check.get("kernel") or {}).get("step_s") or np.median(steps[a]))
    na, nb = _aligned(norms[a], norms[b])
    # A burst can make one round's a-sample longer than a whole step: an extreme round, kept for
    # the trimming to cut (clipped at -99.9%), not dropped as NaN from one side only.
    return np.log(np.maximum(1 + (nb - na) / step_a, 1e-3))


def pair_estimate(check: Mapping[str, Any], a: str, b: str) -> Interval | None:
    """The one speed estimate of b against a, wherever the report shows a pair's speed (its verdict,
    the table's column, the figure, the study's table, the sweep run's metrics): the step-time change
    predicted from the norms' own cost, a log ratio with Yuen's 95% interval over the kernel rounds.
    None when the check did not time both norms."""
    rounds = predicted_rounds(check, a, b)
    return None if rounds is None else trimmed_mean_interval(rounds)


def norm_shares(check: Mapping[str, Any]) -> dict[str, float]:
    """Per variant, its norm's share of a whole step: median norm seconds per step over the kernel
    rounds, divided by the reference's step at the kernels' thread count (variants that do no norm
    work left out)."""
    kernel = check.get("kernel") or {}
    step = kernel.get("step_s")
    norms: Mapping[str, list[float]] = kernel.get("samples_s") or {}
    # An identity (no_norm) is timed too: its rounds measure the timing's own floor, not a norm.
    idle = {v for v, d in (check.get("dispatch") or {}).items() if d.get("fwd") == NO_KERNEL}
    if not step:
        return {}
    return {v: float(np.median(x)) / float(step) for v, x in norms.items() if v not in idle and len(x)}


def compare_speed(check: Mapping[str, Any], pairs: Sequence[tuple[str, str]], margin: float) -> list[SpeedVerdict]:
    """A verdict per pair (b vs a) from a speed check's per-round samples (`variants.json`)."""
    steps: Mapping[str, list[float]] = check.get("samples_s") or {}
    kernel = check.get("kernel") or {}
    norms: Mapping[str, list[float]] = kernel.get("samples_s") or {}
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
    if len(x) < 2:
        return math.nan
    med = float(np.median(x))
    return float(np.median(np.abs(x - med)) / med) if med else math.nan


def load_text(load: Mapping[str, Any] | None) -> str:
    if not load:
        return "load average unknown"
    before, after = load.get("before"), load.get("after")
    if not before:
        return "load average unknown"
    return f"load average {before[0]:.2f}" + (f" → {after[0]:.2f}" if after else "")


def header(check: Mapping[str, Any], reference: str | None) -> str:
    """How the check was made: rounds, time, load, the reference's round-to-round spread."""
    kernel = check.get("kernel") or {}
    s = check.get("settings") or {}
    calls = kernel.get("calls", {}).get(reference) or next(iter(kernel.get("calls", {}).values()), [])
    shapes = ", ".join(f"{c['calls']}× {'x'.join(map(str, c['shape']))} {c['dtype']}" for c in calls) or "none"
    k_spread = spread(kernel.get("samples_s", {}).get(reference, [])) if reference else math.nan
    s_spread = spread(check.get("samples_s", {}).get(reference, [])) if reference else math.nan
    threads = f" on {kernel['threads']} thread(s)" if kernel.get("threads") else ""
    threads += ", timed by the thread's CPU clock" if kernel.get("clock") == "thread_cpu" else ""
    return (
        f"Speed (python -m src.bench variants, variants interleaved in one process; precision {s.get('precision', '?')}, "
        f"compile {s.get('compile', '?')}): each norm's forward+backward at the run's calls per step ({shapes}), "
        f"{kernel.get('rounds', 0)} rounds in {kernel.get('seconds', 0):.0f} s{threads} ({load_text(kernel.get('load'))}); whole steps, "
        f"{s.get('rounds', 0)} rounds ({load_text(check.get('load'))}). Round-to-round spread of {reference}: "
        f"{k_spread:.1%} (norm), {s_spread:.1%} (step). Step time of b vs a, 20% trimmed mean and 95% interval:"
    )


def sentence(v: SpeedVerdict) -> str:
    norm = f", its norm {math.exp(v.norm_ratio.diff):.2f}× [{math.exp(v.norm_ratio.low):.2f}, {math.exp(v.norm_ratio.high):.2f}]" if v.norm_ratio else ""
    text = f"{pair_label(v.a, v.b)}: {v.verdict_text()} — step time {step_time_text(v.predicted)} predicted from the norms' own cost (the verdict's estimate){norm}"
    if v.measured is None:
        return text + "."
    # Two estimates of one pair: the line says which decides and why the other is there.
    measured = f"; whole steps measured {step_time_text(v.measured)} (the check of that prediction: a whole step carries the machine's load, which a norm's own rounds shed)"
    if v.agree:
        return text + measured + ": the two agree."
    if v.measured.se > v.predicted.se:  # wider than the prediction: the load it carries
        return text + measured + ": they disagree; the step-level measurement was too noisy to use."
    return (text + measured + ": they disagree, and the step level was no noisier than the prediction: the whole step moved "
            "by other than the norms' own cost (what a step does beside the norm), so the verdict rests on the norms' cost alone.")


def dispatch_lines(dispatch: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`Kernels that ran: a fwd=fused bwd=fused; ...` and one finding per fused-named composite (what
    this torch build runs here: a fact the speed check measured, not a fault)."""
    if not dispatch:
        return []
    lines = ["Kernels that ran (norm forward / backward: fused, composite or compiled): "
             + "; ".join(f"{v} {d['summary']}" for v, d in dispatch.items()) + "."]  # fmt: skip
    lines += [f"Kernel finding: {d['warning']}" for d in dispatch.values() if d.get("warning")]
    return lines


def speed_lines(check: Mapping[str, Any], pairs: Sequence[tuple[str, str]], margin: float, reference: str | None,
                verdicts: Sequence[SpeedVerdict] | None = None) -> list[str]:  # fmt: skip
    """The report's speed section: how it was measured, one verdict per pair, the kernels that ran
    (`verdicts`: those of `compare_speed` for the same pairs, when already made)."""
    verdicts = compare_speed(check, pairs, margin) if verdicts is None else verdicts
    if not verdicts and not check.get("dispatch"):
        return []
    return [header(check, reference), *(sentence(v) for v in verdicts), *dispatch_lines(check.get("dispatch") or {})]
