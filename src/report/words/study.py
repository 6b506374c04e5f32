"""The "Against the published study" section in words, written from the judgements of
src.report.judge.study (a part's word, what decided it: `Judgement.because`, its numbers), never
re-deciding one: per claim its word, the study's figure, this sweep's and the reason (outside the
claim's domain, which facts leave it and the sweep's own reading, set apart); above the claims the
setting (src.report.words.study_setting), the tables, the method; after claim 5 its open question.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from src.core.tables import text_table
from src.report.analysis import Analysis
from src.report.judge.sequential import SequentialVerdict
from src.report.judge.study import ClaimResult, Finding, StudySection
from src.report.judge.study_effects import Effect, Per
from src.report.judge.study_match import Mismatch
from src.report.kinds.base import interval_of
from src.report.kinds.event import steps_text
from src.report.kinds.metrics import shown
from src.report.numbers import RELATIVE, aside, estimate_text, no_interval_text
from src.report.numbers import SHARE as SHARE_OF
from src.report.read.claims import LOSS, SAVING, SHARE, SPEED, STABILITY, Claim, Part, table_effect
from src.report.words.common import NO_SHARED_SEED, ONE_RUN, how_paired, run_counts
from src.report.words.jobs import timing_caveat
from src.report.words.study_setting import differs_text, setting_lines, study_table
from src.report.words.table import DASH
from src.stats.inference import ALPHA
from src.stats.verdicts import Because, ClaimWord, Direction, Equivalence, Judgement, family_alpha
from src.tracking.tags import DIVERGED, FINISHED

ONE_SEED_SHORT = "one seed gives no interval"
ONE_SEED = f"{ONE_SEED_SHORT} (≥2 seeds do: seed=0,1,2)"
OWN_READING = "this sweep's own reading at its own setting, not a test of the claim"
ONE_RUN_SHORT = f"{ONE_RUN}: a ratio without an interval"
ONE_RUN = f"{ONE_RUN_SHORT} (report.speed_rounds or seed=0,1,2 give one)"
MEASURES_IT = "report.speed_rounds=20 times the norms interleaved in one process"


def _named(part: Part) -> str:
    return f"{part.label} " if part.label else ""


FIGURE_OF = {SPEED: "training time", LOSS: "nats test loss"}  # what a pair's published figure is of


def published_text(claim: Claim, part: Part) -> str:
    metric, value = claim.metric, part.published(claim.metric)
    if metric == SHARE:
        return f"the share {part.kind.claimed(part, SHARE)}"
    if metric == SAVING:  # the sizes are this check's: the study names the architectures' costs, not sizes
        return part.kind.saving_text(part, SAVING)
    if metric == STABILITY:
        typical = f" (training typically collapses within about {claim.collapse_within} steps)" if claim.collapse_within else ""
        return f"NaN by step {value:.0f}{typical}" if math.isfinite(value) else f"its loss goes NaN{typical}"
    if math.isnan(value):
        return f"{part.kind.claimed(part, metric)} {FIGURE_OF[metric]}"
    if not part.minus:
        return f"{shown(metric, value)} {FIGURE_OF[metric]}"
    gaps = [f"{name} {RELATIVE(table_effect(part.table, metric, a, b))}" for name, (a, b) in zip(part.contrast_names, part.contrast_pairs, strict=True)]
    return f"{shown(metric, value, True)} {FIGURE_OF[metric]} ({gaps[0]} less {gaps[1]})"


def not_the_setting(mismatches: Sequence[Mismatch], noun: str = "the study") -> str:
    """`not the study's setting: X has model.norm_placement=post (the study model.norm_placement=pre)`
    (`noun`: who stated the setting, its file's `source_noun`)."""
    return f"not {noun}'s setting: " + ", ".join(f"{label} has {differs_text(key, got, study, noun)}" for label, key, got, study in mismatches)


# --- a claim part ---------------------------------------------------------------------------------------


def measured_by(e: Effect) -> str:
    """How an effect was measured: `speed check, 30 kernel rounds`, `paired over 3 seeds`, `unpaired
    (Welch), n = 2 vs 3`; a time that is not a measurement with its caveat (claims.csv carries it too)."""
    if e.per == Per.KERNEL_ROUNDS:
        return f"speed check, {e.interval.n} kernel rounds"
    if e.per == Per.SHARE_ROUNDS:
        return f"share check, {e.interval.n} interleaved rounds" + (f" on {e.device}" if e.device else "")
    caveat = f"; {timing_caveat(e.timing)}" if not e.measured else ""
    if e.interval.test == "welch":
        return how_paired(False, 0, *e.sizes) + caveat
    return (how_paired(True, e.interval.n) if e.interval.n > 1 else "one run each") + caveat


def unmeasured_text(f: Finding) -> str:
    """A part whose figure is not a measurement: read for no word, and what would measure it ("" otherwise)."""
    if f.effect is None or f.effect.measured:
        return ""
    return f"not read: {timing_caveat(f.effect.timing)}; {MEASURES_IT}"


def part_figure(f: Finding) -> str:
    """This sweep's figure for the part: its estimate with its interval and how it was measured."""
    if f.divergence is not None:
        d = f.divergence
        diverged = int((d.runs.outcome == DIVERGED).sum())
        if diverged:
            return f"{diverged}/{len(d.runs)} runs diverged{steps_text(d.runs)}"
        finished = int((d.runs.outcome == FINISHED).sum())
        if finished < len(d.runs):  # how the others ended, said (`0/2 runs finished, nan steps` before)
            return run_counts(d.runs) + (f", {d.most:.0f} steps" if math.isfinite(d.most) else "")
        return f"{finished}/{len(d.runs)} runs finished, {d.most:.0f} steps"
    e = f.effect
    if e is None:
        return DASH
    if _no_shared_seed(f):
        return f"{DASH} ({NO_SHARED_SEED})"
    contrast = bool(f.part.minus)
    what = {SPEED: "training time", SHARE: "share of a step", SAVING: f.part.kind.saving_noun}.get(f.metric, "nats")
    estimate, how = f"{shown(f.metric, e.diff, contrast)} {what}", measured_by(e)
    if f.shares:  # timed per size: the change of the share (or the saving), and the share at each size
        levels = ", ".join(f"{size} {estimate_text(x, low, high, 1 - f.alpha, SHARE_OF, high > low, 'share round')}"
                           for size, x, low, high in f.shares)  # fmt: skip
        whose = "the saving's share of a step" if f.metric == SAVING else "the share"
        how = f"{how}; {whose} at {levels}"
    if not e.has_interval:
        return f"{estimate} ({how})"
    if not e.spread:  # a zero-wide interval is none: said so, never printed as [x, x]
        return f"{estimate} ({how}, {no_interval_text(e.per.removesuffix('s'))})"
    return f"{interval_of(f, contrast)} {what} ({how})"


def _no_shared_seed(f: Finding) -> bool:
    """Runs on both sides, but no seed finished by both: a paired figure over nothing (printed `+nan`)."""
    e = f.effect
    return e is not None and e.per == Per.SEEDS and e.interval.test == "paired_t" and e.interval.n == 0


def _one(f: Finding) -> tuple[str, str]:
    """Why one run per side, or none paired, gives no interval: in full, and short."""
    if _no_shared_seed(f):
        return f"{NO_SHARED_SEED}: nothing to pair (seed=0,1,2, each finished by both, gives an interval)", NO_SHARED_SEED
    return (ONE_RUN, ONE_RUN_SHORT) if f.metric == SPEED and f.effect is not None and f.effect.per == Per.SEEDS else (ONE_SEED, ONE_SEED_SHORT)


def _sequential_text(decision: SequentialVerdict) -> str:
    settled = f"at look {decision.look}" if decision.look is not None else "open when the sweep stopped"
    return f"direction and equivalence: the sequential sweep's decision, {decision.verdict.label} {settled}, error-controlled over its looks"


def here_text(f: Finding) -> str:
    """Outside the claim's domain: what the part reads at this sweep's own setting ("" without a reading)."""
    here = f.judgement.here if f.judgement else None
    if here is None:
        return ""
    if f.divergence is not None:
        return f"{here.word}: {_inside_reason(f, here)}"
    if here.because == Because.NO_INTERVAL:
        return f"{here.word}: {_one(f)[1]}"
    return str(here.word) + (f"; {_sequential_text(f.decision)}" if f.decision else "")


def part_reason(f: Finding) -> str:
    """Why the part got its word (claims.csv's `reason`)."""
    if f.judgement is None:  # no variant of the sweep is the study's norm
        return "; ".join(dict.fromkeys(not_the_setting(m, f.part.noun) for m in f.mismatch))
    if f.outside:
        here, unmeasured = here_text(f), unmeasured_text(f)
        own = f" (at this sweep's own setting it reads {here})" if here else f" (its figure is {unmeasured})" if unmeasured else ""
        return "; ".join(f.outside) + own
    return _inside_reason(f, f.judgement)


def _inside_reason(f: Finding, j: Judgement) -> str:
    """The reason at the sweep's own setting, from what decided it (`j.because`; an event's: its kind's)."""
    if j.because == Because.NO_RUNS:
        return f"no finished runs of {' and '.join(f.variants)}"
    if unmeasured := unmeasured_text(f):  # read for no word, whatever its interval
        return unmeasured
    if j.because == Because.NO_INTERVAL:
        return _one(f)[0]
    notes = [_sequential_text(f.decision)] if f.decision else []
    if f.processes:
        noun = "process" if f.processes == (1,) else "processes"
        notes.append(f"this sweep trained on {'/'.join(map(str, f.processes))} {noun}, the study on {f.devices}, whose "
                     "all-reduce is part of its step time and shrinks a norm's share of it")  # fmt: skip
    reason = f.part.kind.reason(f, j)
    for note in notes:  # each an aside, inside the reason's own closing parenthesis where it ends in one
        reason = aside(reason, note)
    return reason


# --- a claim --------------------------------------------------------------------------------------------


def claim_reason(c: ClaimResult) -> str:
    """The claim's reason: its parts' (claims.csv's `claim_reason`, the terminal's and report.md's line)."""
    if c.outside:
        # One setting, outside the claim's domain: said once (which of its facts), with the sweep's own
        # reading of each part set apart, so no claim word of that reading is mistaken for the claim's.
        reads = [f"{_named(f.part)}{here}".strip() for f in c.findings if (here := here_text(f))]
        # Parts whose figure is not a measurement share one caveat, said once.
        unmeasured = [f for f in c.findings if unmeasured_text(f)]
        if unmeasured:
            names = " and ".join(f.part.label for f in unmeasured if f.part.label)
            reads.append(f"{names} {unmeasured_text(unmeasured[0])}".strip())
        unswept = "".join(f"; {label} not swept" for label in c.not_swept)
        own = f" ({OWN_READING}: {'; '.join(reads)})" if reads else ""
        return f"outside its domain: {', '.join(why.fact for why in c.outside)}{unswept}{own}"
    several = len(c.findings) + len(c.not_swept) > 1
    reasons = [f"{f.part.label}: {why}" if several and f.part.label else why for f in c.findings if (why := part_reason(f))]
    reasons += [f"{label} not swept" for label in c.not_swept]
    return "; ".join(dict.fromkeys(reasons))


def _head(claim: Claim, word: str) -> str:
    """`1. <word> — <statement>. Study: <figure>.`: how every claim line starts, judged or not."""
    texts = [published_text(claim, p) for p in claim.parts]
    published = "; ".join(f"{_named(p)}{text}" for p, text in zip(claim.parts, texts, strict=True))
    if claim.metric == SHARE and len(set(texts)) == 1:  # one trend claimed of every norm: said once
        published = texts[0]
    note = f" ({claim.note})" if claim.note else ""
    # Whose figure the line quotes: a published study's (its file has a table), else the claim's own statement.
    whose = {"the study": "Study", "the source": "Source"}.get(claim.parts[0].noun, "Claimed")
    return f"{claim.number}. {word} — {said(claim.statement + note)} {whose}: {published}."


def said(statement: str) -> str:
    """A statement as a sentence of its line: its own full stop kept (a quotation ends in one), else one added."""
    return statement if statement.rstrip('"”’').endswith((".", "!", "?")) else f"{statement}."


def claim_line(c: ClaimResult) -> str:
    """`1. partly reproduced — <statement>. Study: <figure>. This sweep: <figure>. → <reason>.`"""
    figures = [f"{_named(f.part)}{part_figure(f)}" for f in c.findings] + [f"{label} not swept" for label in c.not_swept]
    reason = f" → {why}." if (why := claim_reason(c)) else ""
    return f"{_head(c.claim, c.word)} This sweep: {'; '.join(figures)}.{reason}"


UNTIMED = "untimed: the speed check times a share per model size (report.speed_rounds and report.share_rounds above 0)"


def listed(s: StudySection) -> list[tuple[Claim, ClaimWord, list[str]]]:
    """Every claim of the file in its order, with its word and its lines: a judged one with its open
    question; one this sweep ran none of the parts of with the variants it needs; a trend no share
    rounds timed with what would time it."""
    found = {c.claim.number: (c.claim, c.word, [line for line in (claim_line(c), open_question(c)) if line]) for c in s.claims}
    for n, (claim, missing) in s.unjudged.items():
        found[n] = (claim, ClaimWord.NOT_TESTED, [f"{_head(claim, ClaimWord.NOT_TESTED)} → needs {', '.join(missing)} (not swept)."])
    for claim in s.untimed:
        found[claim.number] = (claim, ClaimWord.NOT_TESTED, [f"{_head(claim, ClaimWord.NOT_TESTED)} → {UNTIMED}."])
    return [found[n] for n in sorted(found)]


def open_question(c: ClaimResult) -> str:
    """Claim 5's question in the study's terms: one run's seed spread here, the study's single-seed
    gap in that spread, the paired implementation effect, and whether this sweep can settle it ("" for
    another claim)."""
    q = c.question
    if q is None:
        return ""
    noun = c.claim.parts[0].noun
    edge = "the built-ins' loss edge" if noun == "the study" else "its single-seed loss gap"
    lead = f"{noun[:1].upper()}{noun[1:]}'s open question (is {edge} real, or seed noise?): "
    off = list(dict.fromkeys(why.fact for f in c.findings for why in f.outside))  # one setting: the same for every part
    cannot = f"outside its domain ({', '.join(off)})"
    if not q.df:
        cannot = f"this sweep cannot settle it: {cannot}, and " if off else ""
        if not q.variants:
            return lead + cannot + f"no variant of it ran at {noun}'s setting, so there is no seed spread to measure here."
        return lead + cannot + f"{'one seed' if q.most_seeds == 1 else 'no finished run'} per variant shows no seed spread here; ≥2 seeds (seed=0,1,2) measure it."
    pooled = f"pooled over {len(q.variants)} variants, {q.df} df"
    if q.sd > 0:
        gaps = " and ".join(f"{_named(p)}{p.published(LOSS):+.4f} = {abs(p.published(LOSS)) / (math.sqrt(2) * q.sd):.1f}" for p in c.claim.parts)
        spread = (f"one run's test loss varies over seeds by SD {q.sd:.4f} nats here ({pooled}), so a gap between two "
                  f"single runs of different seeds spreads √2·SD = {math.sqrt(2) * q.sd:.4f}; {noun}'s single-seed gaps "
                  f"are {gaps} such SDs")  # fmt: skip
    else:  # every seed gave one variant the same loss: no seed spread to hold the study's gaps against
        spread = f"one run's test loss is the same on every seed here ({pooled}): no seed spread to set {noun}'s single-seed gaps against"
    effects = [f for f in c.findings if f.readings is not None]
    shows = "; ".join(f"{_named(f.part)}{part_figure(f)}" for f in effects) or "no paired effect with an interval"
    if off:
        same = " In fp32 the hand-rolled and built-in norms compute the same function to rounding: no implementation edge can arise here." if q.fp32 else ""
        return lead + f"{spread}. The paired implementation effect here: {shows}. This sweep cannot settle it: {cannot}.{same}"
    said = f"{lead}{spread}. The paired implementation effect: {shows}: "
    if effects and all(f.readings.equivalence == Equivalence.INSIDE and f.readings.direction == Direction.UNDECIDED for f in effects) and not c.not_swept:
        return said + f"zero within ±{effects[0].margin:g} nats at {noun}'s setting, which settles {noun}'s open question: its gap was not an implementation effect."
    if effects and all(f.readings.direction == Direction.HOLDS for f in effects):
        shown_by = "every interval excludes zero" if all(f.readings.spread for f in effects) else "shown for every part, by its interval or its equal signs"
        return said + f"real at this setting ({shown_by}), so the edge is not seed noise alone."
    if effects and all(f.readings.direction == Direction.OPPOSITE for f in effects):
        return said + f"the opposite of {noun}'s edge at this setting."
    return said + f"not settled at this sweep's seeds ({claim_reason(c)})."


# --- the section ----------------------------------------------------------------------------------------


@dataclass
class StudyText:
    """The section in words: the judged section (`judged`: its data is read there, never through
    this), this sweep's setting beside the study's, and the study's table beside this sweep's."""

    judged: StudySection = field(default_factory=StudySection)
    setting: list[str] = field(default_factory=list)
    table: tuple[list[str], list[list[str]]] | None = None

    @property
    def absent(self) -> str:
        """Why no claim is listed ("" when some is): the sweep ran none of the study's variants."""
        f = self.judged.file
        whose = f"{f.source_noun}'s variants" if f.table else "the variants its claims name"
        return f"this sweep ran none of {whose} ({', '.join(f.variants)}); nothing to compare." if self.judged.ran_none else ""

    @property
    def method(self) -> str:
        """How the section's tests were taken, and what their words promise together ("" without a test):
        its claim parts with an interval and its event claim's exact test, read against its source's
        figure (a file of hypotheses with no table: the claim, whose band its size is)."""
        s, noun = self.judged, self.judged.file.source_noun
        against = f"{noun}'s figure" if noun != "the claim" else "the claimed band"
        if not s.family:
            return ""
        event_claim = next((c.number for c in s.file.claims if c.metric == STABILITY), 0)
        parts = [f"{s.family - s.event} claim part(s) with one"] if s.family > s.event else []
        tests = " and ".join([*parts, *([f"claim {event_claim}'s Fisher exact test"] if s.event else [])])
        line = (f"Each interval below is simultaneous over the section's {tests} (Bonferroni: each at {1 - family_alpha(ALPHA, s.family):.2%}), "
                "so the words they decide hold together at 95%; the report's other comparisons do not change them. A claim's word "
                f"comes from three readings of its interval (direction, size against {against}, equivalence within "
                "the report's margin) and the setting its figure can be expected in (docs/reproducing.md).")  # fmt: skip
        if s.sequential:
            line += (f" For the {s.sequential} part(s) the sequential sweep decided, direction and equivalence are its decisions, "
                     "error-controlled at the sweep's own alpha over its looks, and the size describes a fixed-n interval of data "
                     "the sweep stopped when it chose: those words rest on the sweep's alpha, not on this 95%.")  # fmt: skip
        return line

    def lead(self) -> str:
        f = self.judged.file
        if f.source.figures_from and f.source.setting_from:
            noun = f.source_noun
            return (f"{noun[:1].upper()}{noun[1:]}'s figures come from {f.source.figures_from}, its setting from {f.source.setting_from}. "
                    "Its table and setting beside this sweep's (mean ± 95% CI over finished seeds):")  # fmt: skip
        link = f" ({f.source.link})" if f.source.link else ""
        lead = f"The claims of {f.called}{link}, stated in {f.name}.yaml before this sweep, each judged on it"
        # A table's cells are intervals: their level is said above them, as every interval's is.
        beside = f"; its table{' and setting' if f.setting else ''} beside this sweep's (mean ± 95% CI over finished seeds)" if f.table else ""
        return f"{lead}{beside}:"

    def claim_lines(self) -> list[str]:
        return [line for *_, lines in listed(self.judged) for line in lines]

    def outside_line(self) -> list[str]:
        """One line for the ways this sweep's setting leaves the claims' domains, shared by their lines."""
        facts = self.judged.outside_facts()
        if not facts:
            return []
        where = "the study's domain" if self.judged.file.is_study else "the claims' domains"
        return [f"Outside {where} here: {'; '.join(facts)}. A claim whose domain this leaves reads "
                f"{ClaimWord.NOT_APPLICABLE} and names which of these facts; its figure is still this sweep's, read at this "
                "sweep's own setting and set apart from the claim's word."]  # fmt: skip

    def items(self) -> list[str]:
        """The section's lines after its lead and table: the setting, how intervals were taken, one
        line per claim (and claim 5's open question), or why none."""
        if self.absent:
            return [self.absent]
        return [*self.setting, *self.outside_line(), *([self.method] if self.method else []), *self.claim_lines()]

    def short_items(self) -> list[str]:
        """One line per claim, its number, statement and word: the section where space is short (the
        sweep run's description in MLflow)."""
        if self.absent:
            return [self.absent]
        full = f"the full section, each figure with its interval and reason: report.md and {self.judged.file.files_stem}.png on this run"
        return [*(f"{c.number}. {word} — {c.statement}" for c, word, _ in listed(self.judged)), f"({full})"]

    def lines(self, width: int | None = None) -> list[str]:
        """The section for a terminal or a note: the heading, the lead, the setting, the table (its
        columns split to `width`, when given), the claims."""
        if self.absent:
            return [f"{self.judged.file.heading}: {self.absent}"]
        table = text_table(*self.table, width=width).splitlines() if self.table else []
        rest = self.items()[len(self.setting) :]
        return [f"{self.judged.file.heading} — {self.lead()}", *(f"  {s}" for s in self.setting), *table, *rest]


def study_text(judged: StudySection, runs: pd.DataFrame, table: pd.DataFrame | None, check: Mapping[str, Any]) -> StudyText:
    """The judged section written: its setting beside its source's (src.report.words.study_setting),
    and with the report's table (src.report.read.table.summarize) its source's table beside it."""
    if judged.ran_none:
        return StudyText(judged)
    beside = study_table(table, judged, check) if table is not None and judged.file.table else None
    return StudyText(judged, setting_lines(runs, judged), beside)


def written(a: Analysis, judged: StudySection | None = None) -> StudyText:
    """A claims section of the report in words (default: its first, the study's): the renderers and the headline read it."""
    return study_text(judged or a.study, a.runs, a.table, a.speed.check)

