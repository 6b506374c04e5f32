"""The speed section's words, written from the judged speed check (src.report.judge.speed): how it
was measured, one line per pair (its verdict, the estimate the verdict was read from, the whole-step
check and what that check says), the kernels that ran; and the one way a step-time estimate is
printed with its interval, wherever the report prints one (the table's speed column, the headline,
the study's table). Every interval printed says its level, and its estimate lies inside it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from src.report.judge.speed import (
    MIN_CHECK_ROUNDS,
    Agreement,
    SpeedVerdict,
    check_reference,
    spread,
    timed_variants,
)
from src.report.numbers import (
    FACTOR,
    LOG_RATIO,
    Units,
    equivalent_text,
    estimate_text,
    interval_only,
    level_text,
    no_interval_text,
    settle_text,
)
from src.stats.inference import CONFIDENCE, Interval
from src.stats.pairs import pair_label
from src.stats.verdicts import Decision, SpeedWord
from src.tracking.tags import DEVICE_TAG

if TYPE_CHECKING:
    from src.report.analysis import Analysis

# What the whole-step measurement is there for, said where it is used as a check.
CHECK_ROLE = "the check of that prediction (a whole step carries the machine's load, which a norm's own rounds shed)"
RESTS = "so the verdict rests on the norms' own cost alone"


# --- a step-time estimate with its interval (src.report.numbers writes it) ---------------------


def step_time_text(i: Interval, units: Units = LOG_RATIO) -> str:
    """A log ratio's estimate with its 95% interval (stats.trimmed_mean_interval's), in `units`: a step
    time as the report prints it, `+0.3% [+0.2%, +0.3%] (95% interval)` (b's step against a's)."""
    return estimate_text(i.diff, i.low, i.high, CONFIDENCE, units, spread=i.se != 0, per="round")


def decided_text(i: Interval, d: Decision) -> str:
    """The estimate with the interval its word was read from (TOST's 90% one for an equivalence)."""
    return estimate_text(i.diff, d.low, d.high, d.level, LOG_RATIO, spread=d.spread, per="round")


# --- one pair ----------------------------------------------------------------------------------------


def verdict_text(v: SpeedVerdict) -> str:
    """The verdict word, with the interval that decided an equivalence or the rounds that would settle it."""
    word, d = v.verdict, v.decision
    if word == SpeedWord.EQUIVALENT and d is not None:
        if d.remains:
            return equivalent_text(f"{v.margin:.0%}", decided_text(v.predicted, d))
        # Beside the word, the interval that decided it (TOST's); the estimate after it is the 95% one shown everywhere.
        tost = f"TOST's {interval_only(d.low, d.high, d.level, LOG_RATIO)}" if d.spread else no_interval_text("round")
        return f"{equivalent_text(f'{v.margin:.0%}')} ({tost})"
    if word == SpeedWord.UNRESOLVED and v.rounds_needed:
        return f"{word}: {settle_text(v.rounds_needed, 'kernel rounds')}"
    return str(word)


def check_text(v: SpeedVerdict) -> str:
    """What the whole-step measurement says of the prediction, as judge.speed.agreement decided it."""
    if v.measured is None:
        return ""
    measured = f"; whole steps measured {step_time_text(v.measured)}"
    match v.agreement:
        case Agreement.AGREE:
            return f"{measured}, {CHECK_ROLE}: the two agree."
        case Agreement.DISAGREE:  # precise, and apart: a finding about the step, never noise
            return (f"{measured}, {CHECK_ROLE}: they disagree: the whole step moved by other than the norms' own cost "
                    f"(what a step does beside the norm, or the machine's load on whole steps), {RESTS}.")  # fmt: skip
        case Agreement.TOO_IMPRECISE:
            return (f"{measured} over {v.measured.n} round(s): too imprecise to check the prediction (it does not "
                    f"exclude it, and to bear it out a check needs at least {MIN_CHECK_ROUNDS} rounds and a "
                    f"{level_text(CONFIDENCE)} within the ±{v.margin:.0%} margin of its estimate), {RESTS}.")  # fmt: skip
    return ""


def sentence(v: SpeedVerdict) -> str:
    """One pair's line: its verdict, the estimate it was read from, the norm ratio, the whole-step check."""
    norm = f", its norm {step_time_text(v.norm_ratio, FACTOR)}" if v.norm_ratio else ""
    text = f"{pair_label(v.a, v.b)}: {verdict_text(v)} — step time {step_time_text(v.predicted)} predicted from the norms' own cost (the verdict's estimate){norm}"
    return text + (check_text(v) or ".")


def pair_cells(verdicts: Sequence[SpeedVerdict]) -> dict[str, str]:
    """variant -> `vs a +0.3% [+0.2%, +0.3%] (95% interval)` for each speed verdict that measured it (as b)."""
    return {b: "; ".join(f"vs {v.a} {step_time_text(v.predicted)}" for v in verdicts if v.b == b)
            for b in dict.fromkeys(v.b for v in verdicts)}  # fmt: skip


# --- the section -------------------------------------------------------------------------------------


def share_where(check: Mapping[str, Any]) -> str:
    """Where a norm's share of a step (judge.speed.norm_shares) was read: the model, the device and the
    kernels' threads, for a share holds of one model on one chip (a CPU's ratio of bandwidth to
    compute is not a GPU's)."""
    kernel, s = check.get("kernel") or {}, check.get("settings") or {}
    device = (check.get("environment") or {}).get(DEVICE_TAG) or "an unnamed device"
    threads = f", {kernel['threads']} thread(s)" if kernel.get("threads") else ""
    changed = f" ({', '.join(s['model_overrides'])})" if s.get("model_overrides") else ""
    return f"of a {s.get('model', '?')} step{changed} on {device}{threads}"


def load_text(load: Mapping[str, Any] | None) -> str:
    before, after = (load or {}).get("before"), (load or {}).get("after")
    if not before:
        return "load average unknown"
    return f"load average {before[0]:.2f}" + (f" → {after[0]:.2f}" if after else "")


def _spread_text(x: float) -> str:
    """A round-to-round spread; none where fewer than two rounds were timed or their median is zero
    (no_norm has no norm kernel): printed as `nan%` before."""
    return f"{x:.1%}" if math.isfinite(x) else "none timed"


def header(check: Mapping[str, Any], reference: str | None) -> str:
    """How the check was made: rounds, time, load, the reference's round-to-round spread."""
    kernel, s = check.get("kernel") or {}, check.get("settings") or {}
    calls = kernel.get("calls", {}).get(reference) or next(iter(kernel.get("calls", {}).values()), [])
    shapes = ", ".join(f"{c['calls']}× {'x'.join(map(str, c['shape']))} {c['dtype']}" for c in calls) or "none"
    k_spread = spread(kernel.get("samples_s", {}).get(reference, [])) if reference else math.nan
    s_spread = spread(check.get("samples_s", {}).get(reference, [])) if reference else math.nan
    threads = f" on {kernel['threads']} thread(s)" if kernel.get("threads") else ""
    threads += ", timed by the thread's CPU clock" if kernel.get("clock") == "thread_cpu" else ""
    steps = kernel.get("step_samples_s") or []
    if steps and reference:  # the denominator of every share and prediction, timed in the rounds themselves
        threads += f", a whole {reference} step in each (spread {_spread_text(spread(steps))})"
    return (
        f"Speed (python -m src.bench variants, variants interleaved in one process; precision {s.get('precision', '?')}, "
        f"compile {s.get('compile', '?')}): each norm's forward+backward at the run's calls per step ({shapes}), "
        f"{kernel.get('rounds', 0)} rounds in {kernel.get('seconds', 0):.0f} s{threads} ({load_text(kernel.get('load'))}); whole steps, "
        f"{s.get('rounds', 0)} rounds ({load_text(check.get('load'))}). Round-to-round spread of {reference}: "
        f"{_spread_text(k_spread)} (norm), {_spread_text(s_spread)} (step). Step time of b vs a, 20% trimmed mean and 95% interval:"
    )


def dispatch_lines(dispatch: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`Kernels that ran: a fwd=fused bwd=fused; ...` and one finding per fused-named composite (what
    this torch build runs here: a fact the speed check measured, not a fault)."""
    if not dispatch:
        return []
    lines = ["Kernels that ran (norm forward / backward: fused, composite or compiled): "
             + "; ".join(f"{v} {d['summary']}" for v, d in dispatch.items()) + "."]  # fmt: skip
    lines += [f"Kernel finding: {d['warning']}" for d in dispatch.values() if d.get("warning")]
    return lines


def speed_lines(check: Mapping[str, Any], judged: Sequence[SpeedVerdict], reference: str | None) -> list[str]:
    """The report's speed section: how it was measured, one verdict per pair (`compare_speed`'s on
    the check), the kernels that ran."""
    if not judged and not check.get("dispatch"):
        return []
    return [header(check, reference), *(sentence(v) for v in judged), *dispatch_lines(check.get("dispatch") or {})]


def speed_section(a: Analysis) -> list[str]:
    """The analysed sweep's speed section, from a check of the norms' kernels (an older whole-step
    check's line is the analysis's own): its verdicts and the kernels that ran (`speed_lines`)."""
    if not timed_variants(a.speed.check):
        return []
    return speed_lines(a.speed.check, a.speed_verdicts, check_reference(a.speed.check))
