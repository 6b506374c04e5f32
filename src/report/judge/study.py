"""The report's "Against the published study" section: each of the study's claims (src.report.read.published)
tested as its own hypothesis, with the study's figure, this sweep's figure and one word.

Per claim part: this sweep's effect with an interval (src.report.judge.study_effects: the speed check's
kernel-level prediction for speed, else the runs paired over seeds), taken simultaneous over the
section's family of tests; its readings and its word by the one rule, src/stats/verdicts.py
(**not applicable here** outside the claim's domain: the line says which part of the setting, and
still gives this sweep's figure). A claim whose variants were not swept has a line that names them.

- A sequential sweep's claims take their direction and equivalence from the sweep's own decisions
  (error-controlled over its looks), not from a fixed-n test of optionally stopped data; the size is
  read from the fixed-n interval, as a description, and the method line says what that promises.
- StudyClaim 6 (divergence) is an event: no_norm's divergences against the normalized variants', at its
  learning rate, counted over runs that trained or diverged (Fisher's exact test, in the family).
- Beside claim 5, the study's open question in its terms: one run's seed spread here, the study's
  single-seed gap measured in it, and why this sweep can or cannot settle it.
- The study's table beside this sweep's (`table`), and a forest plot of the claims
  (src.report.figures.claims).

A variant counts as the study's norm only where every other swept axis has the study's value (the
`experiment=gpt2_small_study` preset's: pre-norm, no QK-norm, ...); `torch_layernorm · post` is not
the study's `torch_layernorm`. Torch-free.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from src.core.tables import text_table
from src.report.judge.pairs import Margins
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.speed import pair_estimate, step_time_text
from src.report.judge.study_effects import (
    DomainFact,
    Effect,
    differs,
    fp32_only,
    from_check,
    from_runs,
    outside,
    seed_spread,
)
from src.report.read.published import (
    CLAIMS,
    EQUIVALENCE,
    LOSS,
    MODEL_AXES,
    PRESET,
    SETTING_SOURCE,
    SPEED,
    STABILITY,
    STUDY_CODE,
    STUDY_VARIANTS,
    TABLE,
    TABLE_SOURCE,
    TYPICAL_COLLAPSE,
    Part,
    StudyClaim,
)
from src.report.read.table import AXIS_PREFIX, DASH
from src.report.words.study_setting import setting_lines, study_table
from src.stats.inference import ALPHA
from src.stats.pairs import pair_label
from src.stats.verdicts import (
    Because,
    ClaimWord,
    Direction,
    Equivalence,
    Event,
    Judgement,
    Readings,
    Size,
    claim_family,
    claim_word,
    decided,
    equivalent_text,
    event_seeds,
    family_alpha,
    gate,
    judge_event,
    judge_interval,
    no_evidence,
    read,
    read_alike,
    settle_text,
    speed_bounds,
)
from src.tracking.tags import DIVERGED, FINISHED
from src.tracking.variants import NORM_AXIS, Axis, text

if TYPE_CHECKING:
    from omegaconf import DictConfig

REPRODUCED, PARTLY, NOT_REPRODUCED = ClaimWord.REPRODUCED, ClaimWord.PARTLY, ClaimWord.NOT_REPRODUCED
INCONCLUSIVE, NOT_APPLICABLE, NOT_TESTED = ClaimWord.INCONCLUSIVE, ClaimWord.NOT_APPLICABLE, ClaimWord.NOT_TESTED
__all__ = ["HEADING", "INCONCLUSIVE", "NOT_APPLICABLE", "NOT_REPRODUCED", "NOT_TESTED", "PARTLY", "REPRODUCED", "against_study"]

HEADING = "Against the published study"
CLAIM_TAG = "normsweep.study.claim{}"  # on the sweep's run: one tag per claim, its word
ONE_SEED_SHORT = "one seed gives no interval"
ONE_SEED = f"{ONE_SEED_SHORT} (≥2 seeds do: seed=0,1,2)"
OWN_READING = "this sweep's own reading at its own setting, not a test of the claim"
ONE_RUN_SHORT = "one run each: a ratio without an interval"
ONE_RUN = f"{ONE_RUN_SHORT} (report.speed_rounds or seed=0,1,2 give one)"


@dataclass(frozen=True)
class Finding:
    """One part of a claim on this sweep: its figure, its readings and its word."""

    part: Part
    metric: str
    word: ClaimWord
    reason: str = ""
    figure: str = DASH
    effect: Effect | None = None
    low: float = math.nan  # the family's interval, in the study's units
    high: float = math.nan
    readings: Readings | None = None
    margin: float = math.nan  # the equivalence margin it was read against
    outside: tuple[DomainFact, ...] = ()  # why the setting is outside the claim's domain
    here: str = ""  # outside it: what the interval reads at this sweep's own setting
    judgement: Judgement | None = None  # the word with what decided it (src/stats/verdicts.py), as data

    @property
    def because(self) -> str:
        return self.judgement.because if self.judgement else ""

    @property
    def here_word(self) -> ClaimWord | None:
        """Outside the domain: the word it reads at this sweep's own setting (None: no reading)."""
        return self.judgement.here.word if self.judgement and self.judgement.here else None

    @property
    def estimate(self) -> float:
        return self.effect.diff if self.effect is not None else math.nan


@dataclass(frozen=True)
class ClaimResult:
    claim: StudyClaim
    findings: tuple[Finding, ...]
    not_swept: tuple[str, ...] = ()  # labels of the claim's parts whose norms this sweep did not run
    after: str = ""  # a line that follows the claim's (claim 5: the study's open question)

    @property
    def word(self) -> ClaimWord:
        return claim_word([f.word for f in self.findings], len(self.not_swept))

    @property
    def reason(self) -> str:
        off = {f.outside for f in self.findings}
        if len(off) == 1 and off != {()} and all(f.word == NOT_APPLICABLE for f in self.findings):
            # One setting, outside the claim's domain: said once, with what each part reads at it.
            reads = [f"{_named(f.part)}{f.here}".strip() for f in self.findings if f.here]
            # The setting is said once, above the claims; here only which of its facts, and the sweep's
            # own reading set apart, so no claim word of that reading is mistaken for the claim's.
            unswept = "".join(f"; {label} not swept" for label in self.not_swept)
            own = f" ({OWN_READING}: {'; '.join(reads)})" if reads else ""
            return f"outside its domain: {', '.join(short_reason(why) for why in next(iter(off)))}{unswept}{own}"
        several = len(self.findings) + len(self.not_swept) > 1
        reasons = [f"{f.part.label}: {f.reason}" if several and f.part.label else f.reason for f in self.findings if f.reason]
        reasons += [f"{label} not swept" for label in self.not_swept]
        return "; ".join(dict.fromkeys(reasons))

    def sentence(self) -> str:
        c = self.claim
        published = "; ".join(f"{_named(p)}{published_text(c, p)}" for p in c.parts)
        figures = [f"{_named(f.part)}{f.figure}" for f in self.findings] + [f"{label} not swept" for label in self.not_swept]
        note = f" ({c.note})" if c.note else ""
        reason = f" → {self.reason}." if self.reason else ""
        return f"{c.number}. {self.word} — {c.statement}{note}. Study: {published}. This sweep: {'; '.join(figures)}.{reason}"


def unjudged_line(claim: StudyClaim, missing: Sequence[str]) -> str:
    """A claim this sweep ran none of the parts of: the study's figure, and the variants it needs."""
    published = "; ".join(f"{_named(p)}{published_text(claim, p)}" for p in claim.parts)
    note = f" ({claim.note})" if claim.note else ""
    return f"{claim.number}. {NOT_TESTED} — {claim.statement}{note}. Study: {published}. → needs {', '.join(missing)} (not swept)."


@dataclass
class StudySection:
    claims: list[ClaimResult] = field(default_factory=list)
    setting: list[str] = field(default_factory=list)
    table: tuple[list[str], list[list[str]]] | None = None  # the study's rows beside this sweep's
    method: str = ""  # how the intervals were taken (the family); "" when no word rests on a test
    family: int = 0  # the tests the words rest on: each at 1 - ALPHA / family
    absent: str = ""  # why no claim is listed (the sweep ran none of the study's variants)
    unjudged: dict[int, tuple[StudyClaim, tuple[str, ...]]] = field(default_factory=dict)  # number -> claim, variants it needs

    def _claim_lines(self) -> list[str]:
        """Every claim in the study's order: a judged one with its open question, an unjudged one with what it needs."""
        judged = {c.claim.number: [line for line in (c.sentence(), c.after) if line] for c in self.claims}
        unjudged = {n: [unjudged_line(c, missing)] for n, (c, missing) in self.unjudged.items()}
        return [line for _, lines in sorted({**judged, **unjudged}.items()) for line in lines]

    def outside_clauses(self) -> list[str]:
        """Each way this sweep's setting leaves a claim's domain, once (the first wording of each fact)."""
        seen: dict[str, str] = {}
        for c in self.claims:
            for f in c.findings:
                for why in f.outside:
                    seen.setdefault(short_reason(why), why)
        return list(seen.values())

    def shared_outside_short(self) -> list[str]:
        return [short_reason(why) for why in self.outside_clauses()]

    def lead(self) -> str:
        return f"The study's figures come from {TABLE_SOURCE}, its setting from {SETTING_SOURCE}. Its table and setting beside this sweep's:"

    def items(self) -> list[str]:
        """The section's lines after its lead and table: the setting, how intervals were taken, one
        line per claim (and claim 5's open question), or why none."""
        if self.absent:
            return [self.absent]
        return [*self.setting, *self._outside_line(), *([self.method] if self.method else []), *self._claim_lines()]

    def _outside_line(self) -> list[str]:
        """One line for the ways this sweep's setting leaves the claims' domains, shared by their lines."""
        clauses = self.outside_clauses()
        if not clauses:
            return []
        return [f"Outside the study's domain here: {'; '.join(clauses)}. A claim whose domain this leaves reads "
                f"{NOT_APPLICABLE} and names which of these facts; its figure is still this sweep's, read at this "
                "sweep's own setting and set apart from the claim's word."]  # fmt: skip

    def short_items(self) -> list[str]:
        """One line per claim, its number, statement and word: the section where space is short (the
        sweep run's description in MLflow)."""
        if self.absent:
            return [self.absent]
        full = "the full section, each figure with its interval and reason: report.md and claims.png on this run"
        words = {c.claim.number: (c.claim, c.word) for c in self.claims} | {n: (c, NOT_TESTED) for n, (c, _) in self.unjudged.items()}
        return [*(f"{n}. {word} — {c.statement}" for n, (c, word) in sorted(words.items())), f"({full})"]

    def lines(self, width: int | None = None) -> list[str]:
        """The section for a terminal or a note: the heading, the lead, the setting, the table (its
        columns split to `width`, when given), the claims."""
        if self.absent:
            return [f"{HEADING}: {self.absent}"]
        table = text_table(*self.table, width=width).splitlines() if self.table else []
        rest = self.items()[len(self.setting) :]
        return [f"{HEADING} — {self.lead()}", *(f"  {s}" for s in self.setting), *table, *rest]

    def tags(self) -> dict[str, str]:
        """One tag per listed claim on the sweep's run: its word (filterable in the MLflow UI)."""
        return {CLAIM_TAG.format(c.claim.number): c.word for c in self.claims}

    def to_frame(self) -> pd.DataFrame:
        """claims.csv: one row per claim part with its figures, readings and word (the plot's numbers)."""
        rows = []
        for c in self.claims:
            for f in c.findings:
                band = f.part.band(c.claim.metric) if c.claim.metric != STABILITY else (math.nan, math.nan)
                r = f.readings
                rows.append({
                    "claim": c.claim.number, "part": f.part.label, "metric": c.claim.metric, "a": f.part.a, "b": f.part.b,
                    "minus": " vs ".join(reversed(f.part.minus)) if f.part.minus else "", "asserts": f.part.asserts,
                    "study": f.part.published(c.claim.metric), "band_low": band[0], "band_high": band[1],
                    "estimate": f.estimate, "ci_low": f.low, "ci_high": f.high,
                    "confidence": 1 - family_alpha(ALPHA, self.family) if f.readings else math.nan,
                    "direction": r.direction if r else "", "size": r.size if r else "", "equivalence": r.equivalence if r else "",
                    "margin": f.margin, "part_word": f.word, "claim_word": c.word, "because": f.because,
                    "here_word": f.here_word or "", "reason": f.reason,
                    "claim_reason": c.reason,  # the claim's line, as the terminal and report.md print it
                    "measured_by": f.effect.how if f.effect else "",
                })  # fmt: skip
            rows += [{"claim": c.claim.number, "part": label, "metric": c.claim.metric, "part_word": "not swept", "claim_word": c.word}
                     for label in c.not_swept]  # fmt: skip
        return pd.DataFrame(rows)

    def not_plotted(self) -> dict[int, str]:
        """StudyClaim number -> why the forest plot leaves it out: no part with an interval."""
        drawn = {id(f) for f in self.plotted()}
        out: dict[int, str] = {}
        for c in self.claims:
            if any(id(f) in drawn for f in c.findings):
                continue
            if c.claim.metric == STABILITY:
                out[c.claim.number] = "an event: runs counted, no interval"
            elif any(f.effect is not None and not f.effect.has_interval for f in c.findings):
                out[c.claim.number] = "one run each: no interval"
            else:
                out[c.claim.number] = "no finished runs of its variants at the study's setting"
        out |= dict.fromkeys(self.unjudged, "not swept")
        return dict(sorted(out.items()))

    def plotted(self) -> list[Finding]:
        """The parts the forest plot draws: those with an interval (one end may be unbounded)."""
        return [f for c in self.claims for f in c.findings if math.isfinite(f.estimate) and not (math.isnan(f.low) or math.isnan(f.high))]


def short_reason(reason: DomainFact) -> str:
    """The fact a domain reason states (`CPU run`, `3,230,144 parameters`, `precision fp32`), without
    why it leaves the domain: kept apart as data (src.report.judge.study_effects.DomainFact), never parsed."""
    return reason.fact


def _named(part: Part) -> str:
    return f"{part.label} " if part.label else ""


def pct(x: float) -> str:
    return "+∞" if x == math.inf else f"{x:+.1%}"


def shown(metric: str, x: float, contrast: bool = False) -> str:
    """A value in the study's units: a relative time change, percentage points of two, or nats."""
    if metric == SPEED:
        return f"{x * 100:+.1f} pp" if contrast else pct(x)
    return f"{x:+.4f}"


def published_text(claim: StudyClaim, part: Part) -> str:
    value = part.published(claim.metric)
    if claim.metric == SPEED:
        what = f" (the built-ins' {_effect_text(part.a, part.b)} less the hand-rolled {_effect_text(*part.minus)})" if part.minus else ""
        return f"{shown(SPEED, value, bool(part.minus))} training time{what}"
    if claim.metric == LOSS:
        return f"{value:+.4f} nats test loss"
    return f"NaN by step {value:.0f} (training typically collapses within about {TYPICAL_COLLAPSE} steps)"


def _effect_text(a: str | None, b: str) -> str:
    return pct(TABLE[b].train_time_s / TABLE[str(a)].train_time_s - 1)


# --- which variant is the study's norm -------------------------------------------------------------


def study_values(axes: Sequence[Axis]) -> dict[str, str | None]:
    """column of the runs frame -> the study's value (as a run's param spells it; None where the
    study's configuration has no such key): each swept axis but the norm, and the model axes the
    study fixed. Read from the study preset, the one owner of its configuration."""
    keys = {AXIS_PREFIX + a.name: a.primary for a in axes if a.name != NORM_AXIS} | {k: k for k in MODEL_AXES}
    return {column: _study_value(key) for column, key in keys.items()}


def study_code() -> dict[str, str | None]:
    """The settings of the study's code a config can change (STUDY_CODE), as its preset has them."""
    return {key: _study_value(key) for key in STUDY_CODE}


@functools.cache
def _study_config() -> DictConfig:
    from src.core import paths

    return paths.compose([f"experiment={PRESET}"])


def _study_value(key: str) -> str | None:
    """The study preset's value of `key` as a run's param spells it; None where it has no such key."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(_study_config(), key, default=None, throw_on_missing=False)
    return None if value is None else text(value)


def match(norm: str, runs: pd.DataFrame, values: Mapping[str, str | None], prefer: Mapping[str, str | None] | None = None) -> tuple[str | None, str]:
    """The sweep's variant that is the study's `norm` (every column of `values` at the study's
    value), or None and why not; of several, the one that also has `prefer`'s values, if any."""
    of_norm = runs[runs.norm == norm]
    reasons, found = [], []
    for label, group in of_norm.groupby("variant", sort=False):
        row = group.iloc[0]
        off = [(c, row[c], study) for c, study in values.items() if c in row and row[c] not in ("", study)]  # "": not recorded (older runs)
        if not off:
            found.append((str(label), row))
            continue
        for column, got, study in off:
            key = column.removeprefix(AXIS_PREFIX)
            reasons.append(f"{label} has {key}={got} (the study {'has no ' + key if study is None else f'{key}={study}'})")
    if found:
        best = [label for label, row in found if all(c not in row or row[c] in ("", v) for c, v in (prefer or {}).items())]
        return (best or [found[0][0]])[0], ""
    return None, "not the study's setting: " + ", ".join(dict.fromkeys(reasons))


def _any_precision(values: Mapping[str, str | None]) -> dict[str, str | None]:
    """The study's values less a swept precision: what a claim whose domain holds in any precision matches."""
    return {c: v for c, v in values.items() if c.removeprefix(AXIS_PREFIX).split(".")[0] != "precision"}


# --- what the sweep found ---------------------------------------------------------------------------


@dataclass
class Evidence:
    """What the claims read: the runs, the speed check, a sequential sweep's decisions, the margins."""

    runs: pd.DataFrame
    check: Mapping[str, Any]
    labels: dict[str, str | None]  # study norm -> the sweep's variant that is it (None: not the study's setting)
    why_not: dict[str, str]  # study norm -> why no variant of it is
    margins: Margins
    sequential: Sequence[SequentialVerdict] = ()
    family: int = 1  # the tests the section's words rest on: each at 1 - ALPHA / family
    effects: dict[tuple[str, Part], Effect | None] = field(default_factory=dict)  # measured once per part
    # For a claim whose domain holds in any precision, with a precision swept: its own matching
    # (labels, why_not), the precision left free; None when nothing differs.
    any_precision: tuple[dict[str, str | None], dict[str, str]] | None = None
    views: dict[int, Evidence] = field(default_factory=dict)

    def for_claim(self, claim: StudyClaim) -> Evidence:
        """The evidence as `claim` reads it: a claim that holds in any precision matches the study's
        norms with the precision left free (a swept precision does not take it out of its domain)."""
        if claim.domain.precision or self.any_precision is None:
            return self
        if claim.number not in self.views:
            labels, why_not = self.any_precision
            self.views[claim.number] = replace(self, labels=labels, why_not=why_not, effects={}, any_precision=None, views={})
        view = self.views[claim.number]
        view.family = self.family
        return view

    def runs_of_claim(self, claim: StudyClaim) -> pd.DataFrame:
        return self.runs[self.runs.variant.isin([self.labels.get(v) for v in claim.variants()])]

    def margin(self, metric: str) -> float:
        return self.margins.speed if metric == SPEED else self.margins.test_loss

    @property
    def alpha(self) -> float:
        return family_alpha(ALPHA, self.family)


def effect_of(claim: StudyClaim, part: Part, e: Evidence) -> Effect | None:
    """The part's effect: for speed the speed check's when it timed the norms, else the paired runs'."""
    key = (claim.metric, part)
    if key not in e.effects:
        found = from_check(e.check, part, e.labels) if claim.metric == SPEED else None
        e.effects[key] = found or from_runs(e.runs, part, claim.metric, e.labels, e.margin(claim.metric))
    return e.effects[key]


def _sequential(part: Part, metric: str, e: Evidence) -> SequentialVerdict | None:
    """The sequential sweep's decision on this pair, where it made one (per-run evidence only)."""
    if part.minus is not None or part.a is None:
        return None
    key = "tokens_per_sec" if metric == SPEED else "test_loss"
    label = pair_label(str(e.labels[part.a]), str(e.labels[part.b]))
    return next((v for v in e.sequential if v.pair == label and v.metric == key), None)


def readings_of(part: Part, metric: str, low: float, high: float, e: Evidence, effect: Effect,
                decision: SequentialVerdict | None) -> Readings:  # fmt: skip
    """The readings: from the interval (with no spread, from n equal signs), or, for a sequential
    sweep, direction and equivalence from its decision (and the size from the interval)."""
    # A speed margin is a factor either way (±log(1 + m) of the log ratio), as the speed section reads it.
    bounds = speed_bounds(e.margin(metric)) if metric == SPEED and not part.minus else None
    sign, margin = part.sign(metric), e.margin(metric)
    if effect.spread:
        found = read(low, high, sign, part.band(metric), margin, bounds)
    else:
        found = read_alike(effect.diff, effect.interval.n, sign, margin, e.alpha, bounds)
    if decision is None:
        return found
    same_side = part.sign(metric) == 0 or math.copysign(1, effect.diff) == part.sign(metric)
    return decided(found, decision.verdict, same_side)


def _alike(metric: str, effect: Effect, r: Readings, contrast: bool) -> str:
    """With no spread, what the word rests on instead of an interval: n equal signs."""
    moved = f"all {effect.interval.n} {effect.per} moved by exactly {shown(metric, effect.diff, contrast)}"
    return f"{moved}: no spread, so no interval; sign-flip p = {r.alike_p:.2g}"


def reason_of(claim: StudyClaim, part: Part, j: Judgement, effect: Effect, interval: tuple[float, float], e: Evidence) -> str:
    """Why the part got its word, written from what decided it (`j.because`) with the numbers it read."""
    low, high = interval
    r = j.readings
    metric, m = claim.metric, e.margin(claim.metric)
    margin = f"±{m:.0%}" if metric == SPEED else f"±{m:g} nats"
    study = shown(metric, part.published(metric), bool(part.minus))
    because, contrast = j.because, bool(part.minus)
    settle = settle_text(j.settle, effect.per)
    alike = "" if r is None or r.spread else _alike(metric, effect, r, contrast)
    if because == Because.ALIKE_TOO_FEW:
        return f"{alike}, not below the family's {e.alpha:.2g}: {settle}"
    said = f" ({alike})" if alike else ""
    if part.asserts == EQUIVALENCE:
        band = part.band(metric)
        claimed = f"±{band[1]:.2%}" if metric == SPEED else f"±{band[1]:g}"
        remains = f"{shown(metric, effect.diff, contrast)}" + (f" [{shown(metric, low, contrast)}, {shown(metric, high, contrast)}]" if not alike else "")
        equivalent = equivalent_text(margin.lstrip("±"), remains if r is not None and r.excludes_zero else False)
        return {
            Because.AS_CLOSE: f"{equivalent}, and as close as the study's {claimed}",
            Because.FURTHER_APART: f"{equivalent}, but further apart than the study's {claimed}",
            Because.EQUIVALENT_SIZE_UNTESTED: f"{equivalent}{said}: no interval to hold against the study's {claimed}",
            Because.DIFFER_BY_MARGIN: f"they differ by {margin} or more (a bound itself is a difference that matters){said}",
            Because.BEYOND_CLAIMED: f"the whole interval lies beyond the study's {claimed}: no seed count makes them that close",
        }.get(because) or f"the interval straddles the margin ({margin}) and holds the study's {claimed}: {settle}"
    if because == Because.DIRECTION_AND_SIZE:
        return f"the study's direction, and its {study} is inside the interval"
    if because in (Because.DIRECTION_SMALLER, Because.DIRECTION_LARGER):
        return f"the study's direction, by {'less' if because == Because.DIRECTION_SMALLER else 'more'} than its {study} (outside the interval)"
    if because == Because.DIRECTION_SIZE_UNTESTED:
        return f"the study's direction{said}: no interval to hold against its {study}"
    if because == Because.OPPOSITE:
        return f"the opposite direction{said}"
    if because == Because.ZERO_WITHIN_MARGIN:
        return f"equivalent to zero within {margin}, where the study has {study}{said}"
    smaller = f"; the study's {study} is outside it: any effect here is smaller" if r is not None and r.size == Size.SMALLER else ""
    # Said of the interval printed beside it (a sequential sweep's direction is its own decision's).
    undecided = "the interval holds zero" if r is not None and r.holds_zero else "the direction is undecided"
    return f"{undecided}{smaller}: {settle}"


def _what(metric: str) -> str:
    return "training time" if metric == SPEED else "nats"


def part_finding(claim: StudyClaim, part: Part, e: Evidence) -> Finding:
    """One part on this sweep: its figure, and its judgement from the gates (the domain, the
    evidence), then the interval (src/stats/verdicts.py decides each)."""
    metric = claim.metric
    # The domain is the sweep's setting, judged once per claim (its parts' models differ by a norm's weights).
    runs = e.runs_of_claim(claim)
    off = outside(claim.domain, runs)
    effect = effect_of(claim, part, e)
    if effect is None:
        j = gate(no_evidence(has_runs=False), bool(off), say_here=False)
        why = "; ".join(off) if off else f"no finished runs of {' and '.join(str(e.labels[v]) for v in part.variants())}"
        return Finding(part, metric, j.word, why, outside=tuple(off), judgement=j)
    contrast = bool(part.minus)
    if not effect.has_interval:
        j = gate(no_evidence(has_runs=True), bool(off))
        figure = f"{shown(metric, effect.diff, contrast)} {_what(metric)} ({effect.how})"
        one, short = (ONE_RUN, ONE_RUN_SHORT) if metric == SPEED and effect.per == "seeds" else (ONE_SEED, ONE_SEED_SHORT)
        if off:
            here = f"{INCONCLUSIVE}: {short}"
            return Finding(part, metric, j.word, "; ".join(off) + f" (at this sweep's own setting it reads {here})", figure,
                           effect, outside=tuple(off), here=here, judgement=j)  # fmt: skip
        return Finding(part, metric, j.word, one, figure, effect, judgement=j)
    low, high = effect.at(e.alpha)
    decision = _sequential(part, metric, e)
    readings = readings_of(part, metric, low, high, e, effect, decision)
    j = gate(judge_interval(part.asserts, readings, effect.estimate(e.margin(metric)), e.alpha, effect.trim), bool(off))
    if effect.spread:
        figure = f"{shown(metric, effect.diff, contrast)} [{shown(metric, low, contrast)}, {shown(metric, high, contrast)}] {_what(metric)} ({effect.how})"
    else:  # a zero-wide interval is none: said so, never printed as [x, x]
        figure = f"{shown(metric, effect.diff, contrast)} {_what(metric)} ({effect.how}, all alike: no interval)"
    sequential = ""
    if decision is not None:
        settled = f"at look {decision.look}" if decision.look is not None else "open when the sweep stopped"
        sequential = f"direction and equivalence: the sequential sweep's decision, {decision.label} {settled}, error-controlled over its looks"
    if off:
        here = str(j.here.word) + (f"; {sequential}" if sequential else "")
        return Finding(part, metric, j.word, f"{'; '.join(off)} (at this sweep's own setting it reads {here})", figure,
                       effect, low, high, j.readings, e.margin(metric), tuple(off), here, j)  # fmt: skip
    notes = [n for n in (sequential, differs(claim.domain, runs)) if n]
    reason = reason_of(claim, part, j, effect, (low, high), e) + "".join(f" ({n})" for n in notes)
    return Finding(part, metric, j.word, reason, figure, effect, low, high, j.readings, e.margin(metric), judgement=j)


# --- claim 6: an event ----------------------------------------------------------------------------------

ENDED = (FINISHED, DIVERGED)  # a run that trained through or diverged; failed, killed or running ones did neither


def _event_runs(part: Part, e: Evidence) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """no_norm's label, its runs, and the runs of the study's normalized variants."""
    b = str(e.labels[part.b])
    return b, e.runs[e.runs.variant == b], e.runs[e.runs.variant.isin([v for n, v in e.labels.items() if v and n != part.b])]


def _steps(runs: pd.DataFrame) -> str:
    """` (step 530 each)`, ` (steps 23, 25)`: where the diverged runs stopped."""
    steps = sorted(int(s) for s in runs[runs.outcome == DIVERGED].stopped_at_step.dropna())
    if not steps:
        return ""
    if len(set(steps)) == 1:
        return f" (step {steps[0]:,}{' each' if len(steps) > 1 else ''})"
    return f" (steps {', '.join(f'{s:,}' for s in steps)})" if len(steps) <= 5 else f" (steps {steps[0]:,}–{steps[-1]:,})"


def contrast(runs: pd.DataFrame, normalized: pd.DataFrame) -> tuple[Event, list[str]]:
    """The runs that count on each side, and what was left out: runs that neither trained through
    nor diverged, and normalized runs that finished before no_norm's first divergence (they never
    reached the step in question)."""
    own, theirs = runs[runs.outcome.isin(ENDED)], normalized[normalized.outcome.isin(ENDED)]
    first = own[own.outcome == DIVERGED].stopped_at_step.min()
    short = theirs[(theirs.outcome == FINISHED) & (theirs.steps_done < first)] if math.isfinite(first) else theirs.iloc[:0]
    left = [_left_out(who, frame[~frame.outcome.isin(ENDED)]) for who, frame in (("no_norm's", runs), ("the normalized variants'", normalized))]
    if len(short):
        left.append(f"the normalized variants' {len(short)} run(s) that finished before step {first:,.0f}, where no_norm diverged")
    theirs = theirs.drop(short.index)
    count = int((own.outcome == DIVERGED).sum()), len(own), int((theirs.outcome == DIVERGED).sum()), len(theirs)
    return Event(*count), [x for x in left if x]


def _left_out(who: str, frame: pd.DataFrame) -> str:
    if not len(frame):
        return ""
    steps = sorted({int(s) for s in frame.steps_done.dropna()})
    at = f" at step {', '.join(f'{s:,}' for s in steps[:3])}{'…' if len(steps) > 3 else ''}" if steps else ""
    return f"{who} {len(frame)} {'/'.join(sorted(set(frame.outcome.astype(str))))} run(s){at}, which neither trained through nor diverged"


def _unlike(b: str, runs: pd.DataFrame, normalized: pd.DataFrame) -> str:
    """Why no_norm and the normalized variants are not like for like (another learning rate), or ""."""
    own, theirs = set(runs.lr.dropna()), set(normalized.lr.dropna())
    if not theirs or own == theirs:
        return ""
    return f"{b} at lr {', '.join(f'{x:g}' for x in sorted(own))}, the normalized variants at {', '.join(f'{x:g}' for x in sorted(theirs))}: not like for like"


def divergence_finding(claim: StudyClaim, part: Part, e: Evidence) -> Finding:
    """StudyClaim 6: no_norm diverges where the normalized variants, at its learning rate, train on."""
    b, runs, normalized = _event_runs(part, e)
    diverged = runs[runs.outcome == DIVERGED]
    trained = runs[runs.outcome == FINISHED].steps_done.dropna()
    most = float(trained.max()) if len(trained) else math.nan
    if len(diverged):
        figure = f"{len(diverged)}/{len(runs)} runs diverged{_steps(runs)}"
    else:
        figure = f"{int((runs.outcome == FINISHED).sum())}/{len(runs)} runs finished, {most:.0f} steps"
    unlike = _unlike(b, runs, normalized) if len(normalized) else ""
    event, left = contrast(runs, normalized)
    study_step = part.published(STABILITY)
    j = judge_event(event, e.alpha, most >= study_step, normalized=bool(len(normalized)), like_for_like=not unlike)
    reason = _divergence_reason(j, b, runs, normalized, event, left, most, study_step, unlike, e.alpha)
    off = outside(claim.domain, pd.concat([runs, normalized]))
    if not off:
        return Finding(part, STABILITY, j.word, reason, figure, judgement=j)
    # Outside the domain (a CPU collapse at a raised learning rate, say): what it shows at its own setting.
    gated = gate(j, True)
    here = f"{j.word}: {reason}"
    return Finding(part, STABILITY, gated.word, f"{'; '.join(off)} (at this sweep's own setting it reads {here})", figure,
                   outside=tuple(off), here=here, judgement=gated)  # fmt: skip


def _divergence_reason(j: Judgement, b: str, runs: pd.DataFrame, normalized: pd.DataFrame, event: Event, left: list[str],
                       most: float, study_step: float, unlike: str, alpha: float) -> str:  # fmt: skip
    """The divergence claim's reason, written from what decided it (`j.because`) with the counts."""
    if j.because == Because.NO_NORMALIZED:
        return "no normalized variant of the study's trained beside it"
    if j.because == Because.NOT_LIKE_FOR_LIKE:
        return unlike
    counted = normalized[normalized.outcome.isin(ENDED)]
    seen = f"{b} diverged in {event.k}/{event.n} runs{_steps(runs)}, the normalized variants in {event.k_others}/{event.n_others}{_steps(counted)}"
    nan_by = f"step {study_step:.0f}, by which the study's no-norm loss was NaN"
    reason = {
        Because.NONE_COUNTS: f"none of {b + chr(39) + 's' if not event.n else 'the normalized variants' + chr(39)} runs counts",
        Because.TRAINED_WHERE_OTHERS_DIVERGED: f"{seen}: {b} trained where they diverged",
        Because.TRAINED_PAST_STUDY: f"no NaN in {most:.0f} steps, past {nan_by}",
        Because.TRAINED_TOO_SHORT: f"trained {most:.0f} steps, short of {nan_by} (it says training typically collapses within about {TYPICAL_COLLAPSE})",
        Because.BEYOND_CHANCE: f"{seen}: more often than chance allows (Fisher's exact p = {event.p:.2g})",
        Because.AS_OFTEN: f"{seen}: as often, so the divergence is not the missing norm's",
    }.get(j.because)
    if reason is None:
        seeds = event_seeds(max(round(event.n_others / event.n), 1), alpha)
        reason = (f"{seen}: too few runs to tell that from chance (Fisher's exact p = {event.p:.2g}); {seeds} seeds per "
                  f"variant would settle it if {b} diverged in each and the others in none")  # fmt: skip
    return reason + (f"; left out: {'; '.join(left)}" if left else "")


def evaluate(claim: StudyClaim, e: Evidence) -> ClaimResult | None:
    """The claim on this sweep; None when the sweep ran none of its parts' norms."""
    e = e.for_claim(claim)
    swept = set(e.runs.norm)
    findings, not_swept = [], []
    for part in claim.parts:
        needed = part.variants()
        if not set(needed) <= swept:
            not_swept.append(part.label or " vs ".join(needed))
            continue
        missing = [v for v in needed if e.labels.get(v) is None]
        if missing:
            findings.append(Finding(part, claim.metric, NOT_APPLICABLE, "; ".join(dict.fromkeys(e.why_not[v] for v in missing))))
        elif claim.metric == STABILITY:
            findings.append(divergence_finding(claim, part, e))
        else:
            findings.append(part_finding(claim, part, e))
    if not findings:
        return None
    result = ClaimResult(claim, tuple(findings), tuple(not_swept))
    return replace(result, after=open_question(result, e)) if claim.note and claim.metric == LOSS else result


# --- the study's open question (claim 5) ------------------------------------------------------------


def open_question(result: ClaimResult, e: Evidence) -> str:
    """StudyClaim 5's question in the study's terms: one run's seed spread here, the study's single-seed
    gap in that spread, the paired implementation effect, and whether this sweep can settle it."""
    lead = "The study's open question (is the built-ins' loss edge real, or seed noise?): "
    variants = [str(e.labels[v]) for v in sorted(result.claim.variants()) if e.labels.get(v)]
    sd, df = seed_spread(e.runs, variants)
    off = list(dict.fromkeys(why for f in result.findings for why in f.outside))  # one setting: the same for every part
    if not df:
        cannot = f"this sweep cannot settle it: outside its domain ({', '.join(map(short_reason, off))}), and " if off else ""
        if not variants:
            return lead + cannot + "no variant of it ran at the study's setting, so there is no seed spread to measure here."
        seeds = e.runs[e.runs.variant.isin(variants) & (e.runs.outcome == FINISHED)].groupby("variant").seed.nunique()
        most = int(seeds.max()) if len(seeds) else 0
        return lead + cannot + f"{'one seed' if most == 1 else 'no finished run'} per variant shows no seed spread here; ≥2 seeds (seed=0,1,2) measure it."
    gaps = " and ".join(f"{_named(p)}{p.published(LOSS):+.4f} = {abs(p.published(LOSS)) / (math.sqrt(2) * sd):.1f}" for p in result.claim.parts)
    spread = (f"one run's test loss varies over seeds by SD {sd:.4f} nats here (pooled over {len(variants)} variants, {df} df), "
              f"so a gap between two single runs of different seeds spreads √2·SD = {math.sqrt(2) * sd:.4f}; the study's "
              f"single-seed gaps are {gaps} such SDs")  # fmt: skip
    effects = [f for f in result.findings if f.readings is not None]
    shows = "; ".join(f"{_named(f.part)}{f.figure}" for f in effects) or "no paired effect with an interval"
    if off:
        same = " In fp32 the hand-rolled and built-in norms compute the same function to rounding: no implementation edge can arise here." if fp32_only(e.runs[e.runs.variant.isin(variants)]) else ""
        return lead + f"{spread}. The paired implementation effect here: {shows}. This sweep cannot settle it: outside its domain ({', '.join(map(short_reason, off))}).{same}"
    if effects and all(f.readings.equivalence == Equivalence.INSIDE and f.readings.direction == Direction.UNDECIDED for f in effects) and not result.not_swept:
        return lead + f"{spread}. The paired implementation effect: {shows}: zero within ±{e.margins.test_loss:g} nats at the study's setting, which settles the study's open question: its gap was not an implementation effect."
    if effects and all(f.readings.direction == Direction.HOLDS for f in effects):
        shown_by = "every interval excludes zero" if all(f.readings.spread for f in effects) else "shown for every part, by its interval or its equal signs"
        return lead + f"{spread}. The paired implementation effect: {shows}: real at this setting ({shown_by}), so the edge is not seed noise alone."
    if effects and all(f.readings.direction == Direction.OPPOSITE for f in effects):
        return lead + f"{spread}. The paired implementation effect: {shows}: the opposite of the study's edge at this setting."
    return lead + f"{spread}. The paired implementation effect: {shows}: not settled at this sweep's seeds ({result.reason})."


# --- the section ----------------------------------------------------------------------------------------


def _family(e: Evidence) -> tuple[int, bool]:
    """The claim parts with an interval, and whether claim 6 is tested (its exact test): the family
    every word that rests on a test is taken over."""
    count, event = 0, False
    for claim in CLAIMS:
        view = e.for_claim(claim)
        for part in claim.parts:
            if not (set(part.variants()) <= set(view.runs.norm) and all(view.labels.get(v) for v in part.variants())):
                continue
            if claim.metric == STABILITY:
                b, runs, normalized = _event_runs(part, view)
                found, _ = contrast(runs, normalized)
                event = bool(found.k and found.n_others) and not _unlike(b, runs, normalized)
            else:
                effect = effect_of(claim, part, view)
                count += effect is not None and effect.has_interval
    return claim_family(count, event), event


def _estimate_text(check: Mapping[str, Any]) -> Callable[[str, str], str | None]:
    """b's speed against a as the speed check estimates it (its verdict's number), as text."""

    def text(a: str, b: str) -> str | None:
        found = pair_estimate(check, a, b)
        return step_time_text(found) if found is not None else None

    return text


def method_line(family: int, event: bool, sequential: int) -> str:
    """How the section's tests were taken, and what their words promise together ("" without a test)."""
    if not family:
        return ""
    parts = [f"{family - event} claim part(s) with one"] if family > event else []
    tests = " and ".join([*parts, *(["claim 6's exact test (Fisher)"] if event else [])])
    line = (f"Each interval below is simultaneous over the section's {tests} (Bonferroni: each at {1 - family_alpha(ALPHA, family):.2%}), "
            "so the words they decide hold together at 95%; the report's other comparisons do not change them. A claim's word "
            "comes from three readings of its interval (direction, size against the study's figure, equivalence within "
            "the report's margin) and the setting its figure can be expected in (docs/reproducing.md).")  # fmt: skip
    if sequential:
        line += (f" For the {sequential} part(s) the sequential sweep decided, direction and equivalence are its decisions, "
                 "error-controlled at the sweep's own alpha over its looks, and the size describes a fixed-n interval of data "
                 "the sweep stopped when it chose: those words rest on the sweep's alpha, not on this 95%.")  # fmt: skip
    return line


def against_study(
    runs: pd.DataFrame,
    axes: Sequence[Axis],
    check: Mapping[str, Any],
    margins: Margins,
    table: pd.DataFrame | None = None,
    sequential: Sequence[SequentialVerdict] = (),
) -> StudySection:
    """The section for a sweep: its runs (src.report.read.runs), axes, the latest speed check
    (`variants.json`, empty without one), the report's table (src.report.read.table.summarize) and a
    sequential sweep's decisions."""
    swept = set(runs.norm)
    present = [n for n in STUDY_VARIANTS if n in swept]
    if not present:
        return StudySection(absent=f"this sweep ran none of the study's variants ({', '.join(STUDY_VARIANTS)}); nothing to compare.")
    values = study_values(axes)
    labels, why_not = {}, {}
    for norm in present:
        labels[norm], why_not[norm] = match(norm, runs, values)
    evidence = Evidence(runs, check, labels, why_not, margins, sequential)
    if (free := _any_precision(values)) != values:
        found = {norm: match(norm, runs, free, prefer=values) for norm in present}
        evidence.any_precision = ({n: f[0] for n, f in found.items()}, {n: f[1] for n, f in found.items()})
    evidence.family, event = _family(evidence)
    judged = {c.number: evaluate(c, evidence) for c in CLAIMS}
    claims = [r for r in judged.values() if r is not None]
    # A claim with no part swept still has its line: the variants it needs, in the study's table order.
    unjudged = {c.number: (c, tuple(v for v in STUDY_VARIANTS if v in c.variants() - swept)) for c in CLAIMS if judged[c.number] is None}
    decided_parts = sum(bool(f.readings and _sequential(f.part, c.claim.metric, evidence)) for c in claims for f in c.findings)
    shown_table = study_table(table, labels, _estimate_text(check) if check.get("kernel") else None) if table is not None else None
    return StudySection(claims, setting_lines(runs, study_code()), shown_table, method_line(evidence.family, event, decided_parts),
                        family=evidence.family, unjudged=unjudged)  # fmt: skip
