"""The report's "Against the published study" section: each of the study's claims (src.report.published)
tested as its own hypothesis, with the study's figure, this sweep's figure and one word.

Per claim part: this sweep's effect with an interval (src.report.claim_evidence: the speed check's
kernel-level prediction for speed, else the runs paired over seeds), taken simultaneous over the
section's family of claim parts; its three readings (direction, size, equivalence) and its word,
by the rule of src/stats/claims.py: **reproduced**, **partly reproduced**, **not reproduced**,
**inconclusive** (with the seeds or rounds that would settle it) or **not applicable here** (outside
the claim's domain: the line says which part of the setting, and still gives this sweep's figure).

- A sequential sweep's claims take their direction and equivalence from the sweep's own decisions
  (error-controlled over its looks), not from a fixed-n test of optionally stopped data; the size is
  read from the fixed-n interval, as a description.
- Claim 6 (divergence) is an event: it needs the normalized variants at no_norm's learning rate to
  have trained without diverging.
- Beside claim 5, the study's open question in its terms: one run's seed spread here, the study's
  single-seed gap measured in it, and why this sweep can or cannot settle it.
- The study's table beside this sweep's (`table`), and a forest plot of the claims
  (src.report.claims_plot).

A variant counts as the study's norm only where every other swept axis has the study's value (the
`experiment=gpt2_small_study` preset's: pre-norm, no QK-norm, ...); `torch_layernorm · post` is not
the study's `torch_layernorm`. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from src.core.tables import text_table
from src.report.claim_evidence import Effect, fp32_only, from_check, from_runs, outside, seed_spread
from src.report.comparisons import Margins
from src.report.published import (
    CLAIMS,
    EQUIVALENCE,
    LOSS,
    MODEL_AXES,
    PRESET,
    SETTING_SOURCE,
    SPEED,
    STABILITY,
    STUDY_VARIANTS,
    TABLE,
    TABLE_SOURCE,
    Claim,
    Part,
)
from src.report.sequential_verdicts import SequentialVerdict
from src.report.study_setting import setting_lines, study_table
from src.report.table import AXIS_PREFIX, DASH
from src.stats import claims as rule
from src.stats.claims import INCONCLUSIVE, NOT_APPLICABLE, NOT_REPRODUCED, PARTLY, REPRODUCED, Readings
from src.stats.inference import ALPHA
from src.stats.pairs import pair_label
from src.tracking.tags import DIVERGED, FINISHED
from src.tracking.variants import NORM_AXIS, Axis, text

__all__ = ["HEADING", "INCONCLUSIVE", "NOT_APPLICABLE", "NOT_REPRODUCED", "PARTLY", "REPRODUCED", "against_study"]

HEADING = "Against the published study"
CLAIM_TAG = "normsweep.study.claim{}"  # on the sweep's run: one tag per claim, its word
ONE_SEED = "one seed gives no interval (≥2 seeds do: seed=0,1,2)"
ONE_RUN = "one run each: a ratio without an interval (report.speed_rounds or seed=0,1,2 give one)"


@dataclass(frozen=True)
class Finding:
    """One part of a claim on this sweep: its figure, its readings and its word."""

    part: Part
    metric: str
    word: str
    reason: str = ""
    figure: str = DASH
    effect: Effect | None = None
    low: float = math.nan  # the family's interval, in the study's units
    high: float = math.nan
    readings: Readings | None = None
    margin: float = math.nan  # the equivalence margin it was read against
    outside: tuple[str, ...] = ()  # why the setting is outside the claim's domain
    here: str = ""  # outside it: what the interval reads at this sweep's own setting

    @property
    def estimate(self) -> float:
        return self.effect.diff if self.effect is not None else math.nan


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    findings: tuple[Finding, ...]
    not_swept: tuple[str, ...] = ()  # labels of the claim's parts whose norms this sweep did not run
    after: str = ""  # a line that follows the claim's (claim 5: the study's open question)

    @property
    def word(self) -> str:
        words = [f.word for f in self.findings]
        if set(words) == {NOT_APPLICABLE}:  # a part not swept would be outside the domain too
            return NOT_APPLICABLE
        return rule.claim_word(words + [INCONCLUSIVE] * len(self.not_swept))

    @property
    def reason(self) -> str:
        off = {f.outside for f in self.findings}
        if len(off) == 1 and off != {()} and all(f.word == NOT_APPLICABLE for f in self.findings):
            # One setting, outside the claim's domain: said once, with what each part reads at it.
            reads = [f"{_named(f.part)}{f.here}".strip() for f in self.findings if f.here]
            unswept = "".join(f"; {label} not swept" for label in self.not_swept)
            return "; ".join(next(iter(off))) + (f" (at this sweep's own setting it reads {'; '.join(reads)})" if reads else "") + unswept
        several = len(self.findings) + len(self.not_swept) > 1
        reasons = [f"{f.part.label}: {f.reason}" if several and f.part.label else f.reason for f in self.findings if f.reason]
        reasons += [f"{label} not swept" for label in self.not_swept]
        return "; ".join(dict.fromkeys(reasons))

    def sentence(self) -> str:
        c = self.claim
        published = "; ".join(f"{_named(p)}{published_text(c, p)}" for p in c.parts)
        figures = [f"{_named(f.part)}{f.figure}" for f in self.findings] + [f"{label} not swept" for label in self.not_swept]
        note = f" ({c.note})" if c.note else ""
        reason = f": {self.reason}" if self.reason else ""
        return f"{c.number}. {c.statement}{note}. Study: {published}. This sweep: {'; '.join(figures)}. → {self.word}{reason}."


@dataclass
class StudySection:
    claims: list[ClaimResult] = field(default_factory=list)
    setting: list[str] = field(default_factory=list)
    table: tuple[list[str], list[list[str]]] | None = None  # the study's rows beside this sweep's
    method: str = ""  # how the intervals were taken (the family)
    family: int = 1  # claim parts with an interval: each interval is at 1 - ALPHA / family
    absent: str = ""  # why no claim is listed (the sweep ran none of the norms a claim needs)

    def lead(self) -> str:
        return f"The study's figures come from {TABLE_SOURCE}, its setting from {SETTING_SOURCE}. Its table and setting beside this sweep's:"

    def items(self) -> list[str]:
        """The section's lines after its lead and table: the setting, how intervals were taken, one
        line per claim (and claim 5's open question), or why none."""
        if self.absent:
            return [self.absent]
        claims = [line for c in self.claims for line in (c.sentence(), c.after) if line]
        return [*self.setting, *([self.method] if self.method else []), *claims]

    def short_items(self) -> list[str]:
        """One line per claim, its number, statement and word: the section where space is short (the
        sweep run's description in MLflow)."""
        if self.absent:
            return [self.absent]
        full = "the full section, each figure with its interval and reason: report.md and claims.png on this run"
        return [*(f"{c.claim.number}. {c.claim.statement} → {c.word}" for c in self.claims), f"({full})"]

    def lines(self) -> list[str]:
        """The section for a terminal or a note: the heading, the lead, the setting, the table, the claims."""
        if self.absent:
            return [f"{HEADING}: {self.absent}"]
        table = text_table(*self.table).splitlines() if self.table else []
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
                    "estimate": f.estimate, "ci_low": f.low, "ci_high": f.high, "confidence": 1 - ALPHA / self.family,
                    "direction": r.direction if r else "", "size": r.size if r else "", "equivalence": r.equivalence if r else "",
                    "margin": f.margin, "part_word": f.word, "claim_word": c.word, "reason": f.reason,
                    "measured_by": f.effect.how if f.effect else "",
                })  # fmt: skip
            rows += [{"claim": c.claim.number, "part": label, "metric": c.claim.metric, "part_word": "not swept", "claim_word": c.word}
                     for label in c.not_swept]  # fmt: skip
        return pd.DataFrame(rows)

    def plotted(self) -> list[Finding]:
        """The parts the forest plot draws: those with an interval (one end may be unbounded)."""
        return [f for c in self.claims for f in c.findings if math.isfinite(f.estimate) and not (math.isnan(f.low) or math.isnan(f.high))]


def _named(part: Part) -> str:
    return f"{part.label} " if part.label else ""


def pct(x: float) -> str:
    return "+∞" if x == math.inf else f"{x:+.1%}"


def shown(metric: str, x: float, contrast: bool = False) -> str:
    """A value in the study's units: a relative time change, percentage points of two, or nats."""
    if metric == SPEED:
        return f"{x * 100:+.1f} pp" if contrast else pct(x)
    return f"{x:+.4f}"


def published_text(claim: Claim, part: Part) -> str:
    value = part.published(claim.metric)
    if claim.metric == SPEED:
        what = f" (the built-ins' {_effect_text(part.a, part.b)} less the hand-rolled {_effect_text(*part.minus)})" if part.minus else ""
        return f"{shown(SPEED, value, bool(part.minus))} training time{what}"
    if claim.metric == LOSS:
        return f"{value:+.4f} nats test loss"
    return f"NaN from step {value:.0f}"


def _effect_text(a: str | None, b: str) -> str:
    return pct(TABLE[b].train_time_s / TABLE[str(a)].train_time_s - 1)


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


@dataclass
class Evidence:
    """What the claims read: the runs, the speed check, a sequential sweep's decisions, the margins."""

    runs: pd.DataFrame
    check: Mapping[str, Any]
    labels: dict[str, str | None]  # study norm -> the sweep's variant that is it (None: not the study's setting)
    why_not: dict[str, str]  # study norm -> why no variant of it is
    margins: Margins
    sequential: Sequence[SequentialVerdict] = ()
    family: int = 1  # claim parts read from an interval: each interval is taken at 1 - ALPHA / family
    effects: dict[tuple[str, Part], Effect | None] = field(default_factory=dict)  # measured once per part

    def runs_of_claim(self, claim: Claim) -> pd.DataFrame:
        return self.runs[self.runs.variant.isin([self.labels.get(v) for v in claim.variants()])]

    def margin(self, metric: str) -> float:
        return self.margins.speed if metric == SPEED else self.margins.test_loss


def effect_of(claim: Claim, part: Part, e: Evidence) -> Effect | None:
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
    """The three readings: from the interval, or, for a sequential sweep, direction and equivalence
    from its decision (and the size from the interval)."""
    found = rule.read(low, high, part.sign(metric), part.band(metric), e.margin(metric))
    if decision is None:
        return found
    if decision.verdict == "different":
        same_side = part.sign(metric) == 0 or math.copysign(1, effect.diff) == part.sign(metric)
        return Readings(rule.HOLDS if same_side else rule.OPPOSITE, found.size, rule.UNDECIDED)
    inside = decision.verdict == "equivalent"
    return Readings(rule.UNDECIDED, found.size, rule.INSIDE if inside else rule.UNDECIDED)


def reason_of(claim: Claim, part: Part, r: Readings, word: str, effect: Effect, interval: tuple[float, float], e: Evidence) -> str:
    """Why the part got its word, in a few words with the numbers that decided it."""
    low, high = interval
    metric, m = claim.metric, e.margin(claim.metric)
    margin = f"±{m:.0%}" if metric == SPEED else f"±{m:g} nats"
    study = shown(metric, part.published(metric), bool(part.minus))
    if part.asserts == EQUIVALENCE:
        band = part.band(metric)
        claimed = f"±{band[1]:.2%}" if metric == SPEED else f"±{band[1]:g}"
        if word == REPRODUCED:
            return f"equivalent within {margin}, and as close as the study's {claimed}"
        if word == PARTLY:
            return f"equivalent within {margin}, but further apart than the study's {claimed}"
        if word == NOT_REPRODUCED:
            return f"they differ by more than {margin}"
        straddles = "the interval straddles the margin" if r.equivalence == rule.UNDECIDED else "undecided"
        return f"{straddles} ({margin}): {effect.settle(m, ALPHA / (2 * e.family))}"
    if word == REPRODUCED:
        return f"the study's direction, and its {study} is inside the interval"
    if word == PARTLY:
        return f"the study's direction, by {'less' if r.size == rule.SMALLER else 'more'} than its {study} (outside the interval)"
    if word == NOT_REPRODUCED:
        if r.direction == rule.OPPOSITE:
            return "the opposite direction"
        return f"equivalent to zero within {margin}, where the study has {study}"
    smaller = f"; the study's {study} is outside it: any effect here is smaller" if r.size == rule.SMALLER else ""
    undecided = "the interval holds zero" if low <= 0 <= high else "the direction is undecided"
    near = abs(effect.interval.diff) < effect.margin_units(m)
    return f"{undecided}{smaller}: {effect.settle(m if near else None, ALPHA / (2 * e.family) if near else ALPHA / e.family)}"


def _what(metric: str) -> str:
    return "training time" if metric == SPEED else "nats"


def part_finding(claim: Claim, part: Part, e: Evidence) -> Finding:
    """One part on this sweep: its figure, and its word from the domain, then the interval."""
    metric = claim.metric
    # The domain is the sweep's setting, judged once per claim (its parts' models differ by a norm's weights).
    off = outside(claim.domain, e.runs_of_claim(claim))
    effect = effect_of(claim, part, e)
    if effect is None:
        why = "; ".join(off) if off else f"no finished runs of {' and '.join(str(e.labels[v]) for v in part.variants())}"
        return Finding(part, metric, NOT_APPLICABLE if off else INCONCLUSIVE, why, outside=tuple(off))
    contrast = bool(part.minus)
    if not effect.has_interval:
        figure = f"{shown(metric, effect.diff, contrast)} {_what(metric)} ({effect.how})"
        one = ONE_RUN if metric == SPEED and effect.per == "seeds" else ONE_SEED
        if off:
            here = f"{INCONCLUSIVE}: {one.split(' (')[0]}"
            return Finding(part, metric, NOT_APPLICABLE, "; ".join(off) + f" (at this sweep's own setting it reads {here})", figure,
                           effect, outside=tuple(off), here=here)  # fmt: skip
        return Finding(part, metric, INCONCLUSIVE, one, figure, effect)
    low, high = effect.at(ALPHA / e.family)
    decision = _sequential(part, metric, e)
    readings = readings_of(part, metric, low, high, e, effect, decision)
    word = rule.part_word(part.asserts, readings)
    figure = f"{shown(metric, effect.diff, contrast)} [{shown(metric, low, contrast)}, {shown(metric, high, contrast)}] {_what(metric)} ({effect.how})"
    sequential = ""
    if decision is not None:
        settled = f"at look {decision.look}" if decision.look is not None else "open when the sweep stopped"
        sequential = f"direction and equivalence: the sequential sweep's decision, {decision.label} {settled}, error-controlled over its looks"
    if off:
        here = word + (f"; {sequential}" if sequential else "")
        return Finding(part, metric, NOT_APPLICABLE, f"{'; '.join(off)} (at this sweep's own setting it reads {here})", figure,
                       effect, low, high, readings, e.margin(metric), tuple(off), here)  # fmt: skip
    reason = reason_of(claim, part, readings, word, effect, (low, high), e) + (f" ({sequential})" if sequential else "")
    return Finding(part, metric, word, reason, figure, effect, low, high, readings, e.margin(metric))


def divergence_finding(claim: Claim, part: Part, e: Evidence) -> Finding:
    """Claim 6: no_norm diverges where the normalized variants, at its learning rate, train on."""
    b = str(e.labels[part.b])
    runs = e.runs[e.runs.variant == b]
    normalized = e.runs[e.runs.variant.isin([v for n, v in e.labels.items() if v and n != part.b])]
    diverged = runs[runs.outcome == DIVERGED]
    steps = sorted(int(s) for s in diverged.stopped_at_step.dropna())
    trained = runs.steps_done.dropna()
    most = float(trained.max()) if len(trained) else math.nan
    if len(diverged):
        figure = f"{len(diverged)}/{len(runs)} runs diverged (step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps)) or '?'})"
    else:
        figure = f"{int((runs.outcome == FINISHED).sum())}/{len(runs)} runs finished, {most:.0f} steps"
    word, reason = _divergence_word(b, runs, normalized, most, part.published(STABILITY))
    off = outside(claim.domain, pd.concat([runs, normalized]))
    if not off:
        return Finding(part, STABILITY, word, reason, figure)
    # Outside the domain (a CPU collapse at a raised learning rate, say): what it shows at its own setting.
    if word == NOT_APPLICABLE:
        return Finding(part, STABILITY, NOT_APPLICABLE, f"{'; '.join(off)}; {reason}", figure, outside=tuple(off))
    here = f"{word}: {reason}"
    return Finding(part, STABILITY, NOT_APPLICABLE, f"{'; '.join(off)} (at this sweep's own setting it reads {here})", figure,
                   outside=tuple(off), here=here)  # fmt: skip


def _divergence_word(b: str, runs: pd.DataFrame, normalized: pd.DataFrame, most: float, study_step: float) -> tuple[str, str]:
    """The divergence claim's word and reason from the runs alone (the domain aside)."""
    own, theirs = set(runs.lr.dropna()), set(normalized.lr.dropna())
    if not len(normalized):
        return NOT_APPLICABLE, "no normalized variant of the study's trained beside it"
    if theirs and own != theirs:
        lrs = f"{b} at lr {', '.join(f'{x:g}' for x in sorted(own))}, the normalized variants at {', '.join(f'{x:g}' for x in sorted(theirs))}"
        return NOT_APPLICABLE, f"{lrs}: not like for like"
    normalized_diverged = int((normalized.outcome == DIVERGED).sum())
    diverged = bool((runs.outcome == DIVERGED).any())
    if normalized_diverged:
        too = f"{normalized_diverged}/{len(normalized)} runs of the normalized variants diverged too at this learning rate"
        return (NOT_APPLICABLE, f"{too}: the divergence is not the missing norm's") if diverged else (NOT_REPRODUCED, f"{too}, and no_norm trained")
    if diverged:
        return REPRODUCED, "the normalized variants trained at the same learning rate"
    if not (most >= study_step):
        return NOT_APPLICABLE, f"trained {most:.0f} steps, fewer than the {study_step:.0f} the study's run lasted"
    return NOT_REPRODUCED, f"no NaN in {most:.0f} steps"


def evaluate(claim: Claim, e: Evidence) -> ClaimResult | None:
    """The claim on this sweep; None when the sweep ran none of its parts' norms."""
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
    """Claim 5's question in the study's terms: one run's seed spread here, the study's single-seed
    gap in that spread, the paired implementation effect, and whether this sweep can settle it."""
    lead = "The study's open question (is the built-ins' loss edge real, or seed noise?): "
    variants = [str(e.labels[v]) for v in sorted(result.claim.variants()) if e.labels.get(v)]
    sd, df = seed_spread(e.runs, variants)
    off = list(dict.fromkeys(why for f in result.findings for why in f.outside))  # one setting: the same for every part
    if not df:
        cannot = f"this sweep cannot settle it: {'; '.join(off)}; and " if off else ""
        return lead + cannot + "one seed per variant shows no seed spread here; ≥2 seeds (seed=0,1,2) measure it."
    gaps = " and ".join(f"{_named(p)}{p.published(LOSS):+.4f} = {abs(p.published(LOSS)) / (math.sqrt(2) * sd):.1f}" for p in result.claim.parts)
    spread = (f"one run's test loss varies over seeds by SD {sd:.4f} nats here (pooled over {len(variants)} variants, {df} df), "
              f"so a gap between two single runs of different seeds spreads √2·SD = {math.sqrt(2) * sd:.4f}; the study's "
              f"single-seed gaps are {gaps} such SDs")  # fmt: skip
    effects = [f for f in result.findings if f.readings is not None]
    shows = "; ".join(f"{_named(f.part)}{f.figure}" for f in effects) or "no paired effect with an interval"
    if off:
        same = " In fp32 the hand-rolled and built-in norms compute the same function to rounding: no implementation edge can arise here." if fp32_only(e.runs[e.runs.variant.isin(variants)]) else ""
        return lead + f"{spread}. The paired implementation effect here: {shows}. This sweep cannot settle it: {'; '.join(off)}.{same}"
    if effects and all(f.readings.equivalence == rule.INSIDE and f.readings.direction == rule.UNDECIDED for f in effects) and not result.not_swept:
        return lead + f"{spread}. The paired implementation effect: {shows}: zero within ±{e.margins.test_loss:g} nats at the study's setting, which settles the study's open question: its gap was not an implementation effect."
    if effects and all(f.readings.direction == rule.HOLDS for f in effects):
        return lead + f"{spread}. The paired implementation effect: {shows}: real at this setting (every interval excludes zero), so the edge is not seed noise alone."
    if effects and all(f.readings.direction == rule.OPPOSITE for f in effects):
        return lead + f"{spread}. The paired implementation effect: {shows}: the opposite of the study's edge at this setting."
    return lead + f"{spread}. The paired implementation effect: {shows}: not settled at this sweep's seeds ({result.reason})."


# --- the section ----------------------------------------------------------------------------------------


def _family(e: Evidence) -> int:
    """The claim parts with an interval: the family every interval of the section is taken over."""
    count = 0
    for claim in CLAIMS:
        if claim.metric == STABILITY:
            continue
        for part in claim.parts:
            if set(part.variants()) <= set(e.runs.norm) and all(e.labels.get(v) for v in part.variants()):
                effect = effect_of(claim, part, e)
                count += effect is not None and effect.has_interval
    return max(count, 1)


def method_line(family: int) -> str:
    level = 1 - ALPHA / family
    return (f"Each interval below is simultaneous over the section's {family} claim part(s) with one (Bonferroni: each at {level:.2%}), "
            "so all the words hold together at 95%; the report's other comparisons do not change them. A claim's word "
            "comes from three readings of its interval (direction, size against the study's figure, equivalence within "
            "the report's margin) and the setting its figure can be expected in (docs/reproducing.md).")  # fmt: skip


def against_study(
    runs: pd.DataFrame,
    axes: Sequence[Axis],
    check: Mapping[str, Any],
    margins: Margins,
    table: pd.DataFrame | None = None,
    sequential: Sequence[SequentialVerdict] = (),
) -> StudySection:
    """The section for a sweep: its runs (src.report.runs), axes, the latest speed check
    (`variants.json`, empty without one), the report's table (src.report.table.summarize) and a
    sequential sweep's decisions."""
    present = [n for n in STUDY_VARIANTS if n in set(runs.norm)]
    if not present:
        return StudySection(absent=f"this sweep ran none of the study's variants ({', '.join(STUDY_VARIANTS)}); nothing to compare.")
    values = study_values(axes)
    labels, why_not = {}, {}
    for norm in present:
        labels[norm], why_not[norm] = match(norm, runs, values)
    evidence = Evidence(runs, check, labels, why_not, margins, sequential)
    evidence.family = _family(evidence)
    claims = [r for c in CLAIMS if (r := evaluate(c, evidence)) is not None]
    if not claims:
        return StudySection(absent=f"this sweep ran {', '.join(present)} of the study's variants; each claim needs another ({', '.join(sorted(set(TABLE) - set(present)))} not swept).")
    shown_table = study_table(table, labels) if table is not None else None
    return StudySection(claims, setting_lines(runs), shown_table, method_line(evidence.family), family=evidence.family)
