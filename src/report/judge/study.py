"""The study's claims (src.report.read.published) judged on a sweep, as data: per part a `Finding`,
its word with what decided it (src.stats.verdicts' Judgement), the effect (src.report.judge.study_effects)
and its interval simultaneous over the section's family, the domain facts, a sequential sweep's decision
(its direction and equivalence, error-controlled over its looks, replace the fixed-n test's) and the
numbers the sentences need; claim 6 an event (Fisher's exact test over runs that trained or diverged),
claim 5 with its open question's numbers. src.report.words.study writes every sentence. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import pandas as pd

from src.report.judge.pairs import Margins
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.study_effects import (
    DomainFact,
    Effect,
    Timing,
    from_check,
    from_runs,
    jobs_timing,
    outside,
    precision_inside,
    precision_name,
    processes,
    seed_spread,
    share_effect,
    share_levels,
    shares_timed,
)
from src.report.judge.study_match import Mismatch, differences, match, split_precision, study_values
from src.report.kinds.event import Divergence
from src.report.read.claims import LOSS, SIZED, SPEED, STABILITY, Claim, ClaimsFile, Domain, Part
from src.report.read.published import STUDY
from src.report.read.table import most_seeds
from src.stats.inference import ALPHA
from src.stats.pairs import pair_label
from src.stats.verdicts import (
    ClaimWord,
    Judgement,
    Readings,
    claim_word,
    decided,
    family_alpha,
    gate,
    no_evidence,
    read,
    read_alike,
    speed_bounds,
)
from src.tracking.tags import FINISHED
from src.tracking.variants import Axis


@dataclass(frozen=True)
class Finding:
    """One part of a claim on this sweep: its word with what decided it, and what it was read from."""

    part: Part
    metric: str
    word: ClaimWord
    effect: Effect | None = None
    low: float = math.nan  # the family's interval, in the study's units
    high: float = math.nan
    margin: float = math.nan  # the equivalence margin it was read against
    outside: tuple[DomainFact, ...] = ()  # why the setting is outside the claim's domain
    judgement: Judgement | None = None  # the word with what decided it (src/stats/verdicts.py); None: not matched
    alpha: float = math.nan  # the family's level
    variants: tuple[str, ...] = ()  # the sweep's variants it reads
    decision: SequentialVerdict | None = None  # a sequential sweep's decision, where it made one
    processes: tuple[int, ...] = ()  # this sweep's process counts, where they differ from the study's
    divergence: Divergence | None = None  # claim 6's counts
    mismatch: tuple[tuple[Mismatch, ...], ...] = ()  # no variant is the study's norm: why, per norm
    shares: tuple[tuple[str, float, float, float], ...] = ()  # a trend: (model size, share, low, high) each
    devices: int = 0  # the source's process count, where its setting has one

    @property
    def readings(self) -> Readings | None:
        return self.judgement.readings if self.judgement else None

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
class OpenQuestion:
    """Claim 5's open question (is the built-ins' edge seed noise?), as numbers: one run's seed spread here."""

    variants: tuple[str, ...]  # the claim's variants at the study's setting
    sd: float  # one run's test loss over seeds, pooled (NaN: no spread measured)
    df: int
    most_seeds: int  # the most finished seeds of one variant
    fp32: bool  # every run in fp32: hand-rolled and built-in compute the same function


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    findings: tuple[Finding, ...]
    not_swept: tuple[str, ...] = ()  # labels of the claim's parts whose norms this sweep did not run
    question: OpenQuestion | None = None  # claim 5: the study's open question

    @property
    def word(self) -> ClaimWord:
        return claim_word([f.word for f in self.findings], len(self.not_swept))

    @property
    def outside(self) -> tuple[DomainFact, ...]:
        """The facts that take the claim's setting out of its domain, when all its parts read *not applicable* for them."""
        off = {f.outside for f in self.findings}
        return next(iter(off)) if len(off) == 1 and all(f.word == ClaimWord.NOT_APPLICABLE for f in self.findings) else ()


class Reach(StrEnum):
    """Where this sweep stands with a claim: tested inside its domain, inside its domain but not tested
    (the variants it needs were not run at the study's setting), or outside its domain. "Not tested"
    is never counted as outside: run the missing variants at this setting and it is tested."""

    TESTED = "tested in its domain"
    UNTESTED = "in its domain, not tested"
    OUTSIDE = "outside its domain"


@dataclass(frozen=True)
class SetAside:
    """A variant of the study's norms that no claim read, and how it differs from the study's setting
    (another init, another precision where the study's own ran beside it)."""

    variant: str
    runs: int
    why: tuple[Mismatch, ...]  # (variant, key, its value, the study's)


@dataclass
class StudySection:
    """The section's judgements, as data."""

    claims: list[ClaimResult] = field(default_factory=list)
    unjudged: dict[int, tuple[Claim, tuple[str, ...]]] = field(default_factory=dict)  # number -> claim, variants it needs
    family: int = 0  # the tests the words rest on: each at 1 - ALPHA / family
    event: bool = False  # claim 6's exact test is one of them
    sequential: int = 0  # the parts whose direction and equivalence the sequential sweep decided
    labels: dict[str, str | None] = field(default_factory=dict)  # study norm -> the sweep's variant that is it
    ran_none: bool = False  # the sweep ran none of the study's variants
    reach: dict[int, Reach] = field(default_factory=dict)  # every claim's number -> where this sweep stands with it
    domain_facts: dict[int, tuple[DomainFact, ...]] = field(default_factory=dict)  # a claim outside its domain -> why
    read: tuple[str, ...] = ()  # the variants the claims read
    set_aside: tuple[SetAside, ...] = ()  # the study's norms' other variants, which no claim read
    timing: Timing = Timing.OWN_DEVICE  # how the jobs' own times were taken (the table's speed columns)
    file: ClaimsFile = STUDY  # the claims file judged
    untimed: tuple[Claim, ...] = ()  # trend claims no share rounds timed: not tested here, said so

    def reached(self, reach: Reach) -> list[int]:
        """The claims (numbers, in order) where this sweep stands at `reach`: the headline's counts."""
        return sorted(n for n, r in self.reach.items() if r == reach)

    def outside_facts(self) -> list[DomainFact]:
        """Each way this sweep's setting leaves a claim's domain, once (the first wording of each fact)."""
        seen: dict[str, DomainFact] = {}
        for why in (w for c in self.claims for f in c.findings for w in f.outside):
            seen.setdefault(why.fact, why)
        return list(seen.values())


# --- what the sweep found ---------------------------------------------------------------------------


@dataclass
class Evidence:
    """What the claims read: the runs, the speed check, a sequential sweep's decisions, the margins."""

    runs: pd.DataFrame
    check: Mapping[str, Any]
    labels: dict[str, str | None]  # study norm -> the sweep's variant that is it (None: not the study's setting)
    why_not: dict[str, tuple[Mismatch, ...]]  # study norm -> why no variant of it is
    margins: Margins
    sequential: Sequence[SequentialVerdict] = ()
    family: int = 1  # the tests the section's words rest on: each at 1 - ALPHA / family
    effects: dict[tuple[str, Part], Effect | None] = field(default_factory=dict)  # measured once per part
    source: ClaimsFile = STUDY  # the claims file judged

    def variants_read(self, claim: Claim) -> set[str]:
        """The variants `claim` reads here: its norms' (claim 6 also every normalized variant it counts)."""
        norms = set(self.labels) if claim.metric == STABILITY else claim.variants()
        return {str(v) for n, v in self.labels.items() if n in norms and v}

    def margin(self, metric: str) -> float:
        """The equivalence margin: nats of test loss, else relative (a time, a norm's share)."""
        return self.margins.test_loss if metric == LOSS else self.margins.speed

    @property
    def alpha(self) -> float:
        return family_alpha(ALPHA, self.family)


def effect_of(claim: Claim, part: Part, e: Evidence) -> Effect | None:
    """The part's effect: for speed the speed check's when it timed the norms, else the paired runs'."""
    key = (claim.metric, part)
    if key not in e.effects and claim.metric in SIZED:
        e.effects[key] = share_effect(e.check, part)
    if key not in e.effects:
        found = from_check(e.check, part, e.labels) if claim.metric == SPEED else None
        e.effects[key] = found or from_runs(e.runs, part, claim.metric, e.labels, e.margin(claim.metric))
    return e.effects[key]


def _sequential(part: Part, metric: str, e: Evidence) -> SequentialVerdict | None:
    """The sequential sweep's decision on this pair, where it made one: on the metric it decided
    (tokens per second for a time, test loss for a loss), per-run evidence only. A share or a saving
    is timed in the speed check's rounds, which no sequential sweep decides: the pair's loss decision
    read as a saving's direction said "undecided" beside an interval wholly on one side."""
    key = {SPEED: "tokens_per_sec", LOSS: "test_loss"}.get(metric)
    if part.minus is not None or part.a is None or key is None:
        return None
    label = pair_label(str(e.labels[part.a]), str(e.labels[part.b]))
    return next((v for v in e.sequential if v.pair == label and v.metric == key), None)


def readings_of(part: Part, metric: str, low: float, high: float, e: Evidence, effect: Effect,
                decision: SequentialVerdict | None) -> Readings:  # fmt: skip
    """The readings: from the interval (with no spread, from n equal signs), or, for a sequential
    sweep, direction and equivalence from its decision (and the size from the interval)."""
    # A speed margin is a factor either way (±log(1 + m) of the log ratio), as the speed section reads it.
    bounds = speed_bounds(e.margin(metric)) if metric in (SPEED, *SIZED) and not part.minus else None
    sign, margin = part.kind.sign(part, metric), e.margin(metric)
    if effect.spread:
        found = read(low, high, sign, part.band(metric), margin, bounds)
    else:
        found = part.kind.alike(read_alike(effect.diff, effect.interval.n, sign, margin, e.alpha, bounds))
    if decision is None:
        return found
    same_side = sign == 0 or math.copysign(1, effect.diff) == sign
    return decided(found, decision.verdict, same_side)


def part_finding(claim: Claim, part: Part, e: Evidence) -> Finding:
    """One part on this sweep: its judgement from the gates (the domain, the evidence), then the
    interval, or an event's count of runs (src/stats/verdicts.py decides each)."""
    # The domain is the sweep's setting, judged once per claim (its parts' models differ by a norm's weights):
    # the setting of the runs it reads (an event's: no_norm's and the normalized variants').
    runs = e.runs[e.runs.variant.isin(e.variants_read(claim))]
    off = tuple(outside(claim.domain, runs, e.source))
    found = Finding(part, claim.metric, ClaimWord.INCONCLUSIVE, outside=off, alpha=e.alpha,
                    variants=tuple(str(e.labels.get(v, v)) for v in part.variants()),
                    devices=e.source.setting.devices if e.source.setting else 0)  # fmt: skip
    if claim.metric == STABILITY:  # no_norm diverges where the normalized variants, at its learning rate, train on
        d = Divergence.of(str(e.labels[part.b]), runs, claim.collapse_within)
        # Outside the domain (a CPU collapse at a raised learning rate, say): what it shows at its own setting.
        j = gate(d.judge(part.published(STABILITY), e.alpha, most_seeds(runs)), bool(off))
        return replace(found, word=j.word, judgement=j, divergence=d)
    effect = effect_of(claim, part, e)
    # No interval, or the jobs' times on a CPU (shown with their caveat, read for no word): no evidence.
    if effect is None or not (effect.has_interval and effect.measured):
        j = gate(no_evidence(has_runs=effect is not None), bool(off), say_here=effect is not None and effect.measured)
        low, high = effect.at(e.alpha) if effect is not None and effect.has_interval else (math.nan, math.nan)
        return replace(found, word=j.word, effect=effect, low=low, high=high, judgement=j)
    low, high = effect.at(e.alpha)
    decision = _sequential(part, claim.metric, e) if part.kind.sequential else None
    readings = readings_of(part, claim.metric, low, high, e, effect, decision)
    j = gate(part.kind.judge(part, low, high, readings, effect.estimate(e.margin(claim.metric)), e.alpha, effect.trim), bool(off))
    return replace(found, word=j.word, effect=effect, low=low, high=high, margin=e.margin(claim.metric), judgement=j,
                   decision=decision, processes=processes(claim.domain, runs, e.source),
                   shares=share_levels(e.check, part, e.alpha) if claim.metric in SIZED else ())  # fmt: skip


def evaluate(claim: Claim, e: Evidence) -> ClaimResult | None:
    """The claim on this sweep (`e`: the evidence matched for its domain); None when the sweep ran none
    of its parts' norms."""
    if claim.metric in SIZED:  # timed apart from the runs: each part judged where the share check timed its norm
        timed = [p for p in claim.parts if shares_timed(e.check, p)]
        untimed = tuple(p.label or p.b for p in claim.parts if p not in timed)
        return ClaimResult(claim, tuple(part_finding(claim, p, e) for p in timed), untimed) if timed else None
    swept = set(e.runs.norm)
    findings, not_swept = [], []
    for part in claim.parts:
        needed = part.variants()
        if not set(needed) <= swept:
            not_swept.append(part.label or " vs ".join(needed))
            continue
        missing = [v for v in needed if e.labels.get(v) is None]
        if missing:
            findings.append(Finding(part, claim.metric, ClaimWord.NOT_APPLICABLE, mismatch=tuple(e.why_not[v] for v in missing)))
        else:
            findings.append(part_finding(claim, part, e))
    if not findings:
        return None
    question = open_question(claim, e) if claim.open_question and claim.metric == LOSS else None
    return ClaimResult(claim, tuple(findings), tuple(not_swept), question)


def open_question(claim: Claim, e: Evidence) -> OpenQuestion:
    """Claim 5's open question, as numbers: one run's seed spread here over the claim's variants."""
    variants = tuple(str(e.labels[v]) for v in sorted(claim.variants()) if e.labels.get(v))
    runs = e.runs[e.runs.variant.isin(variants)]
    finished = runs[runs.outcome == FINISHED]
    return OpenQuestion(variants, *seed_spread(finished), most_seeds(finished), precision_name(runs.precision) == {"fp32"})


# --- the section ----------------------------------------------------------------------------------------


def _family(claims: Sequence[ClaimResult]) -> tuple[int, bool]:
    """The claim parts with an interval, and whether claim 6 is tested (its exact test): the family
    every word that rests on a test is taken over (inside a claim's domain or not)."""
    found = [f for c in claims for f in c.findings]
    count = sum(f.effect is not None and f.effect.has_interval and f.effect.measured for f in found)
    event = any(d.event.k and d.event.n_others and d.like_for_like for f in found if (d := f.divergence))
    return count + event, event  # each then taken at src.stats.verdicts.family_alpha


def precision_rank(domain: Domain, study: Mapping[str, str | None]) -> Callable[[pd.DataFrame], tuple[bool, bool]]:
    """Of a norm's variants that differ only in a swept precision: the study's own first, then one in
    the claim's domain (bf16 for a 16-bit-autocast claim where fp32 ran beside it), then the first."""
    return lambda runs: (bool(differences("", runs.iloc[0], study)), not precision_inside(domain, runs))


def _setting_runs(runs: pd.DataFrame, seen: set[str], variants: Sequence[str]) -> pd.DataFrame:
    """The runs whose setting a claim not read here is held against: the runs read, else the file's norms', else all."""
    for chosen in (runs[runs.variant.isin(seen)], runs[runs.norm.isin(variants)]):
        if len(chosen):
            return chosen
    return runs


def _reach(judged: Mapping[int, ClaimResult | None], runs: pd.DataFrame, claims: Sequence[Claim],
           source: ClaimsFile) -> tuple[dict[int, Reach], dict[int, tuple[DomainFact, ...]]]:  # fmt: skip
    """Per claim where this sweep stands, and the facts that take it out of its domain: a claim read
    at its own setting has them from its findings; one read with no variant at its setting is held
    against the setting of the runs that were read; one not read at all is not tested here (`Reach`)."""
    reach, facts = {}, {}
    for claim in claims:
        result = judged.get(claim.number)
        if result is None:
            reach[claim.number] = Reach.UNTESTED
            continue
        tested = [f for f in result.findings if f.judgement is not None]
        off = next((f.outside for f in tested if f.outside), ()) if tested else tuple(outside(claim.domain, runs, source))
        reach[claim.number] = Reach.OUTSIDE if off else Reach.TESTED if tested else Reach.UNTESTED
        if off:
            facts[claim.number] = off
    return reach, facts


def _set_aside(runs: pd.DataFrame, seen: set[str], values: Mapping[str, str | None], variants: Sequence[str]) -> tuple[SetAside, ...]:
    """The study's norms' variants no claim read (none when no claim read any), each with how it
    differs from the study's setting."""
    if not seen:
        return ()
    rest = runs[runs.norm.isin(variants) & ~runs.variant.isin(seen)]
    return tuple(
        SetAside(str(label), len(group), tuple(dict.fromkeys(differences(str(label), group.iloc[0], values))))
        for label, group in rest.groupby("variant", sort=False)
    )


def against_study(runs: pd.DataFrame, axes: Sequence[Axis], check: Mapping[str, Any], margins: Margins,
                  sequential: Sequence[SequentialVerdict] = (), source: ClaimsFile | None = None) -> StudySection:  # fmt: skip
    """The section's judgements of a claims file (`source`; None: the study's) for a sweep: its runs
    (src.report.read.runs), axes, the latest speed check (`variants.json`, empty without one) and a
    sequential sweep's decisions. A trend claim is listed where the check timed its norm's share (it
    reads no run); a file whose every claim is such is judged whatever variants the sweep ran."""
    source = source or STUDY
    variants = source.variants
    swept = set(runs.norm)
    present = [n for n in variants if n in swept]
    # The claims this sweep can list: a trend only where its share was timed.
    listed = tuple(c for c in source.claims if c.metric not in SIZED or any(shares_timed(check, p) for p in c.parts))
    # Per claim the variants it needs that the sweep did not run, in the study's table order.
    needs = {c.number: tuple(v for v in variants if v in c.variants() - swept) for c in source.claims}
    # Not listed: a trend whose norms were not all swept needs them (the check times swept norms only);
    # one whose norms were swept was not timed (no share rounds ran).
    untimed = tuple(c for c in source.claims if c not in listed and not needs[c.number])
    if not present and not any(c.metric in SIZED for c in listed):
        return StudySection(ran_none=True, file=source, untimed=untimed)
    values = study_values(axes, source)

    def matched(wanted: Mapping[str, str | None], rank: Callable[[pd.DataFrame], tuple[bool, ...]] | None = None) -> Evidence:
        found = {norm: match(norm, runs, wanted, rank) for norm in present}
        return Evidence(runs, check, {n: f[0] for n, f in found.items()}, {n: f[1] for n, f in found.items()}, margins, sequential,
                        source=source)  # fmt: skip

    # Precision is a fact of each claim's domain, judged by one rule whether swept or not: every claim
    # matches the study's norms with it left free, and reads, of several, the variant its domain prefers.
    study_precision, others = split_precision(values)
    domains = {c.domain.precision: c.domain for c in listed}
    evidence = {p: matched(others, precision_rank(d, study_precision)) for p, d in domains.items()}

    def judge() -> dict[int, ClaimResult | None]:
        return {c.number: evaluate(c, evidence[c.domain.precision]) for c in listed}

    # Each part's interval is taken at the family's level, and the family counts the parts with one.
    family, event = _family([r for r in judge().values() if r is not None])
    for e in evidence.values():
        e.family = family
    judged = judge()
    claims = [r for r in judged.values() if r is not None]
    # A claim with no part swept (or a trend not listed for want of its norms) still has its line.
    unjudged = {c.number: (c, needs[c.number]) for c in source.claims if judged.get(c.number) is None and needs[c.number]}
    decided_parts = sum(bool(f.readings and f.decision) for c in claims for f in c.findings)
    seen = {v for c in listed if judged[c.number] is not None and c.metric not in SIZED for v in evidence[c.domain.precision].variants_read(c)}
    setting = _setting_runs(runs, seen, variants)
    reach, facts = _reach(judged, setting, source.claims, source)
    return StudySection(claims, unjudged, family, event, decided_parts, matched(values).labels, reach=reach, domain_facts=facts,
                        read=tuple(v for v in dict.fromkeys(runs.variant) if v in seen),
                        set_aside=_set_aside(runs, seen, values, variants), timing=jobs_timing(setting, runs), file=source,
                        untimed=untimed)  # fmt: skip
