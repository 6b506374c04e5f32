"""The report's "Against the published study" section: each of the study's claims (src.report.published)
with the study's figure, this sweep's figure and one word: reproduced, not reproduced or untestable here.

A claim is listed when the sweep ran the norms it needs. Its figures come from what the report has
already measured, never from a second computation:

- speed claims (training time): the end-of-sweep speed check's kernel-level prediction of the step-time
  change with its interval (src.report.speed); without one, the per-run tokens/s comparison (paired over
  seeds, src.report.comparisons) as a training-time ratio. On anything but CUDA they are *untestable
  here*: the study timed CUDA kernels, and the kernels a CPU runs (named from the runs' dispatch record)
  are others; the figure still says what this sweep shows;
- loss claims: the paired test-loss comparison of the two variants (its verdict: equivalent within
  ±margin, different, inconclusive); one seed gives no interval, so it is *untestable here*;
- the divergence claim: the outcome of the no_norm runs, at the normalized variants' learning rate.

A variant counts as the study's norm only where every other swept axis has the study's value (the
`experiment=gpt2_small_study` preset's: pre-norm, no QK-norm, ...); `torch_layernorm · post` is not
the study's `torch_layernorm`. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from src.report.comparisons import Margins, Result
from src.report.published import (
    CLAIMS,
    EQUIVALENT,
    LOSS,
    MODEL_AXES,
    PRESET,
    SOURCE,
    SPEED,
    STABILITY,
    STUDY_VARIANTS,
    TABLE,
    Claim,
    Part,
)
from src.report.speed import SpeedVerdict, compare_speed
from src.report.study_setting import on_cuda, setting_lines
from src.report.table import AXIS_PREFIX
from src.tracking.tags import DIVERGED, FINISHED
from src.tracking.variants import NORM_AXIS, Axis, text

HEADING = "Against the published study"
REPRODUCED, NOT_REPRODUCED, UNTESTABLE = "reproduced", "not reproduced", "untestable here"
CLAIM_TAG = "normsweep.study.claim{}"  # on the sweep's run: one tag per claim, its word
# What a comparison found for b against a, whatever measured it:
LOWER, HIGHER, SAME, UNDECIDED, NO_INTERVAL = "lower", "higher", "equivalent", "undecided", "no interval"


@dataclass(frozen=True)
class Found:
    """A comparison's outcome in the claims' terms, with the sweep's figure as text."""

    outcome: str  # LOWER, HIGHER, SAME, UNDECIDED or NO_INTERVAL
    figure: str
    detail: str = ""  # what settles an undecided one; the margin of an equivalence


@dataclass(frozen=True)
class Finding:
    """One part of a claim (one pair) on this sweep."""

    part: Part
    figure: str
    word: str
    reason: str = ""


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    findings: tuple[Finding, ...]
    not_swept: tuple[str, ...] = ()  # labels of the claim's parts whose norms this sweep did not run

    @property
    def word(self) -> str:
        words = {f.word for f in self.findings}
        if words == {UNTESTABLE}:
            return UNTESTABLE
        return NOT_REPRODUCED if NOT_REPRODUCED in words else REPRODUCED

    @property
    def reason(self) -> str:
        return "; ".join(dict.fromkeys(f.reason for f in self.findings if f.reason))

    def sentence(self) -> str:
        c = self.claim
        published = "; ".join(f"{_named(p)}{published_text(c, p)}" for p in c.parts)
        figures = [f"{_named(f.part)}{f.figure}" for f in self.findings]
        figures += [f"{label} not swept" for label in self.not_swept]
        note = f" ({c.note})" if c.note else ""
        reason = f": {self.reason}" if self.reason else ""
        return f"{c.number}. {c.statement}{note}. Study: {published}. This sweep: {'; '.join(figures)}. → {self.word}{reason}."


@dataclass
class StudySection:
    claims: list[ClaimResult] = field(default_factory=list)
    setting: list[str] = field(default_factory=list)
    absent: str = ""  # why no claim is listed (the sweep ran none of the norms a claim needs)

    def lead(self) -> str:
        return f"The study: {SOURCE}. The setting, this sweep's against the study's:"

    def items(self) -> list[str]:
        """The section's lines after its lead: the setting, then one line per claim (or why none)."""
        if self.absent:
            return [self.absent]
        return [*self.setting, *(c.sentence() for c in self.claims)]

    def lines(self) -> list[str]:
        """The section for a terminal or a note: the heading, the lead, the lines."""
        if self.absent:
            return [f"{HEADING}: {self.absent}"]
        return [f"{HEADING} — {self.lead()}", *(f"  {s}" for s in self.setting), *self.items()[len(self.setting) :]]

    def tags(self) -> dict[str, str]:
        """One tag per listed claim on the sweep's run: its word (filterable in the MLflow UI)."""
        return {CLAIM_TAG.format(c.claim.number): c.word for c in self.claims}


def _named(part: Part) -> str:
    return f"{part.label} " if part.label else ""


def published_text(claim: Claim, part: Part) -> str:
    value = part.published(claim.metric)
    if claim.metric == SPEED:
        return f"{value:+.1%} training time"
    if claim.metric == LOSS:
        return f"{value:+.4f} nats test loss"
    return f"NaN from step {value:.0f}"


# --- which variant is the study's norm -------------------------------------------------------------


def study_values(axes: Sequence[Axis]) -> dict[str, str | None]:
    """column of the runs frame -> the study's value (as a run's param spells it; None where the
    study's configuration has no such key): each swept axis but the norm, and the model axes the
    study fixed. Read from the study preset, the one owner of its configuration."""
    from omegaconf import OmegaConf

    from src.core import paths

    keys = {AXIS_PREFIX + a.name: a.primary for a in axes if a.name != NORM_AXIS} | {k: k for k in MODEL_AXES}
    study = paths.compose([f"experiment={PRESET}"])
    out: dict[str, str | None] = {}
    for column, key in keys.items():
        value = OmegaConf.select(study, key, default=None, throw_on_missing=False)
        out[column] = None if value is None else text(value)
    return out


def match(norm: str, runs: pd.DataFrame, values: Mapping[str, str | None]) -> tuple[str | None, str]:
    """The sweep's variant that is the study's `norm` (every column of `values` at the study's
    value), or None and why not."""
    of_norm = runs[runs.norm == norm]
    reasons = []
    for label, group in of_norm.groupby("variant", sort=False):
        row = group.iloc[0]
        off = [(c, row[c], study) for c, study in values.items() if c in row and row[c] not in ("", study)]  # "": not recorded (older runs)
        if not off:
            return str(label), ""
        for column, got, study in off:
            key = column.removeprefix(AXIS_PREFIX)
            reasons.append(f"{label} has {key}={got} (the study {'has no ' + key if study is None else study})")
    return None, "not the study's setting: " + ", ".join(dict.fromkeys(reasons))


# --- what the sweep found ---------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def from_speed_check(v: SpeedVerdict) -> Found:
    p = v.predicted
    figure = f"{_pct(math.expm1(p.diff))} [{_pct(math.expm1(p.low))}, {_pct(math.expm1(p.high))}] step time (speed check, from the norms' kernels: {v.verdict_text()})"
    outcome = {"faster": LOWER, "slower": HIGHER, "equivalent": SAME}.get(v.verdict, UNDECIDED)
    settle = f"about {v.rounds_needed} kernel rounds would settle it" if v.rounds_needed else "more kernel rounds would settle it"
    return Found(outcome, figure, settle if outcome == UNDECIDED else f"±{v.margin:.0%}")


def from_comparison(r: Result, as_time: bool, cuda: bool) -> Found:
    """A paired comparison's outcome; tokens/s turned into training time (b's time / a's - 1)."""
    p = r.primary

    def shown(x: float) -> str:
        if not as_time:
            return f"{x:+.4f}"
        # An interval of tokens/s changes can reach -100% and below (a t-interval over few seeds):
        # the time it stands for is then unbounded.
        return _pct(1 / (1 + x) - 1) if x > -1 else "+∞"

    if r.verdict == "untested" or not math.isfinite(p.low):
        runs = "one run each" + ("" if cuda else ", one after another: the machine's load as much as the norm")
        return Found(NO_INTERVAL, f"{shown(p.diff)} {'training time' if as_time else 'nats'} ({runs})")
    low, high = (shown(p.high), shown(p.low)) if as_time else (shown(p.low), shown(p.high))
    what = "training time, per run" if as_time else "nats"
    figure = f"{shown(p.diff)} [{low}, {high}] {what} (paired over {p.n} seeds: {r.verdict_text()})"
    if r.verdict == "equivalent":
        return Found(SAME, figure, f"±{r.margin:g} nats" if not as_time else f"±{r.margin:.0%}")
    if r.verdict == "different":
        smaller = p.diff > 0 if as_time else p.diff < 0  # more tokens/s is less time
        return Found(LOWER if smaller else HIGHER, figure)
    seeds = f"about {r.seeds} seeds would settle it" if r.seeds else "more seeds would settle it"
    return Found(UNDECIDED, figure, seeds)


def word_for(test: str, found: Found, one_seed: str) -> tuple[str, str]:
    """The claim's word for what the sweep found, and the reason in a few words."""
    if found.outcome == NO_INTERVAL:
        return UNTESTABLE, one_seed
    if found.outcome == UNDECIDED:
        return UNTESTABLE, f"undecided: {found.detail}"
    if test == EQUIVALENT:
        return (REPRODUCED, "") if found.outcome == SAME else (NOT_REPRODUCED, "they differ")
    if found.outcome == LOWER:
        return REPRODUCED, ""
    if found.outcome == SAME:
        return NOT_REPRODUCED, f"equivalent within {found.detail}"
    return NOT_REPRODUCED, "the opposite direction"


def _comparison(results: Sequence[Result], a: str, b: str, metric: str) -> Result | None:
    return next((r for r in results if (r.a, r.b) == (a, b) and r.metric == metric), None)


def _dispatch(runs: pd.DataFrame, label: str) -> str:
    found = [d for d in runs[runs.variant == label].dispatch if d] if "dispatch" in runs else []
    return found[0] if found else "kernels not recorded"


@dataclass
class Evidence:
    """What the report measured that the claims read."""

    runs: pd.DataFrame
    comparisons: Sequence[Result]
    speed: Sequence[SpeedVerdict]
    labels: dict[str, str | None]  # study norm -> the sweep's variant that is it (None: not the study's setting)
    why_not: dict[str, str]  # study norm -> why no variant of it is


def speed_finding(claim: Claim, part: Part, a: str, b: str, e: Evidence) -> Finding:
    check = next((v for v in e.speed if (v.a, v.b) == (a, b)), None)
    pair = e.runs[e.runs.variant.isin([a, b])]
    cuda = on_cuda(pair)
    result = _comparison(e.comparisons, a, b, "tokens_per_sec")
    if check is not None:
        found = from_speed_check(check)
    elif result is not None:
        found = from_comparison(result, as_time=True, cuda=cuda)
    else:
        return Finding(part, "—", UNTESTABLE, "no speed measured for this pair")
    if not cuda:  # what the sweep shows instead: its figure, and the kernels each side ran here
        kind = _values_text(pair.device_type)
        figure = f"{found.figure}, kernels {a} {_dispatch(e.runs, a)}, {b} {_dispatch(e.runs, b)}"
        why = f"{kind.upper() if kind == 'cpu' else kind} run: the study's speed claims are about CUDA kernels"
        return Finding(part, figure, UNTESTABLE, why)
    one = "one run each: a ratio without an interval (report.speed_rounds or seeds=0,1,2 give one)"
    return Finding(part, found.figure, *word_for(claim.test, found, one))


def _values_text(column: pd.Series) -> str:
    return "/".join(dict.fromkeys(str(v) for v in column))


def loss_finding(claim: Claim, part: Part, a: str, b: str, e: Evidence) -> Finding:
    result = _comparison(e.comparisons, a, b, "test_loss")
    if result is None:
        return Finding(part, "—", UNTESTABLE, f"no finished runs of both {a} and {b}")
    found = from_comparison(result, as_time=False, cuda=True)
    if claim.note and found.outcome == NO_INTERVAL:
        one = "one seed cannot answer it (≥2 seeds do: seed=0,1,2)"
    else:
        one = "one seed gives no interval (≥2 seeds do: seed=0,1,2)"
    word, reason = word_for(claim.test, found, one)
    if claim.note and found.outcome == SAME:
        reason += ": the edge is seed noise, which settles the study's open question"
    return Finding(part, found.figure, word, reason)


def divergence_finding(part: Part, b: str, e: Evidence) -> Finding:
    runs = e.runs[e.runs.variant == b]
    normalized = e.runs[e.runs.variant.isin([v for n, v in e.labels.items() if v and n != part.b])]
    diverged = runs[runs.outcome == DIVERGED]
    steps = sorted(int(s) for s in diverged.stopped_at_step.dropna())
    if len(diverged):
        figure = f"{len(diverged)}/{len(runs)} runs diverged (step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps)) or '?'})"
    else:
        trained = runs.steps_done.dropna()
        figure = f"{int((runs.outcome == FINISHED).sum())}/{len(runs)} runs finished, {int(trained.max()) if len(trained) else '?'} steps"
    own, theirs = set(runs.lr.dropna()), set(normalized.lr.dropna())
    if theirs and own != theirs:
        lrs = f"{b} at lr {', '.join(f'{x:g}' for x in sorted(own))}, the normalized variants at {', '.join(f'{x:g}' for x in sorted(theirs))}"
        return Finding(part, figure, UNTESTABLE, f"{lrs}: not like for like")
    if len(diverged):
        return Finding(part, figure, REPRODUCED)
    study_step = part.published(STABILITY)
    trained = runs.steps_done.dropna()
    most = float(trained.max()) if len(trained) else math.nan
    if not (most >= study_step):
        return Finding(part, figure, UNTESTABLE, f"trained {most:.0f} steps, fewer than the {study_step:.0f} the study's run lasted")
    return Finding(part, figure, NOT_REPRODUCED, f"no NaN in {most:.0f} steps")


def evaluate(claim: Claim, e: Evidence) -> ClaimResult | None:
    """The claim on this sweep; None when the sweep ran none of its parts' norms."""
    swept = set(e.runs.norm)
    findings, not_swept = [], []
    for part in claim.parts:
        needed = [v for v in (part.a, part.b) if v is not None]
        if not set(needed) <= swept:
            not_swept.append(part.label or " vs ".join(needed))
            continue
        missing = [v for v in needed if e.labels.get(v) is None]
        if missing:
            findings.append(Finding(part, "—", UNTESTABLE, "; ".join(e.why_not[v] for v in missing)))
            continue
        a, b = (e.labels[part.a] if part.a else None), str(e.labels[part.b])
        if claim.metric == SPEED:
            findings.append(speed_finding(claim, part, str(a), b, e))
        elif claim.metric == LOSS:
            findings.append(loss_finding(claim, part, str(a), b, e))
        else:
            findings.append(divergence_finding(part, b, e))
    return ClaimResult(claim, tuple(findings), tuple(not_swept)) if findings else None


def against_study(
    runs: pd.DataFrame,
    axes: Sequence[Axis],
    comparisons: Sequence[Result],
    check: Mapping[str, Any],
    margins: Margins,
) -> StudySection:
    """The section for a sweep: its runs (src.report.runs), axes, paired comparisons and the latest
    speed check (`variants.json`, empty without one)."""
    present = [n for n in STUDY_VARIANTS if n in set(runs.norm)]
    if not present:
        return StudySection(absent=f"this sweep ran none of the study's variants ({', '.join(STUDY_VARIANTS)}); nothing to compare.")
    values = study_values(axes)
    labels, why_not = {}, {}
    for norm in present:
        labels[norm], why_not[norm] = match(norm, runs, values)
    pairs = [(labels[p.a], labels[p.b]) for c in CLAIMS if c.metric == SPEED for p in c.parts if labels.get(p.a) and labels.get(p.b)]
    speed = compare_speed(check, pairs, margins.speed) if check.get("kernel") else []
    evidence = Evidence(runs, comparisons, speed, labels, why_not)
    claims = [r for c in CLAIMS if (r := evaluate(c, evidence)) is not None]
    if not claims:
        return StudySection(absent=f"this sweep ran {', '.join(present)} of the study's variants; each claim needs another ({', '.join(sorted(set(TABLE) - set(present)))} not swept).")
    return StudySection(claims, setting_lines(runs))

