"""The report's sections, walked once for every output: the page (report.md, report.html), the terminal
text and the verdict (the sweep run's description in MLflow). Where the outputs differ in what a section
shows, it is written here beside the others'; render/markdown.py, html.py and terminal.py lay blocks out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from src.core.terminal import WIDTH
from src.report.analysis import Analysis
from src.report.judge.study import StudySection
from src.report.words import sequential, stability
from src.report.words.headline import HEADING as HEADLINE
from src.report.words.headline import headline
from src.report.words.pairs import heading, nothing_to_compare, section_sentences
from src.report.words.speed import pair_cells
from src.report.words.study import StudyText, written
from src.report.words.table import display_rows
from src.stats.verdicts import PairWord

Table = tuple[list[str], list[list[str]]]  # headers, rows


class Output(StrEnum):
    PAGE = "page"  # report.md and report.html: every section under its heading
    TERMINAL = "terminal"  # what a sweep ends with: lines that fit a terminal
    VERDICT = "verdict"  # the sweep run's description in MLflow: short (`Cut`)


class Cut(IntEnum):
    """How much the verdict leaves to report.md as space runs short, each level on top of the one
    before (the page and the terminal: nothing)."""

    NONE = 0
    PAIRS = 1  # the pairs' sentences: their count, and where they are
    REASONS = 2  # the claims' reasons: the study's table and a word per claim stay
    TABLE = 3  # the study's table: a word per claim stays


@dataclass(frozen=True)
class Block:
    """A section: each part may be empty. `items` are a page's bullets; on a terminal, one line each,
    indented where `listed` (short lines of a list rather than sentences)."""

    heading: str = ""
    lead: str = ""
    table: Table | None = None
    items: Sequence[str] = ()
    listed: bool = False


PAIRS_HEADING = "Is it more than seed noise? Paired comparisons"
VERDICT_TABLE = "Per variant (mean ± 95% CI over finished seeds)"
TABLE_CELLS = "Cells are mean ± 95% CI (t) over finished seeds."


def blocks(a: Analysis, output: Output, width: int = WIDTH, cut: Cut = Cut.NONE) -> list[Block]:
    """The report's sections as `output` shows them, in order: the headline, the table, the pairs,
    the sequential verdicts, the learning-rate stability, the study (its last: what a sweep ends with).
    The verdict leaves the stability to report.md; only the terminal counts the runs left out."""
    page, terminal, verdict = (output == o for o in Output)
    said = _said(a)
    found = [Block("" if verdict else HEADLINE, items=said.headline, listed=True)]
    # Every interval with its level, the terminal's table too (its cells are mean ± half-width).
    lead = (f"{len(a.runs)} runs from `{a.tracking_uri}`. {TABLE_CELLS}" if page else TABLE_CELLS if terminal else "")
    found.append(Block(VERDICT_TABLE if verdict else "", lead, said.table))
    found += [Block(lead=a.code_note)] if a.code_note and not verdict else []
    found.append(_pairs(a, said.pairs, output, cut))
    if a.sequential:
        found.append(Block(sequential.HEADING, items=[sequential.sentence(v) for v in a.sequential], listed=True))
    if a.stability is not None and not verdict:
        found.append(Block(stability.HEADING if page else "", items=stability.sentences(a.stability, a.sensitivity)))
    if a.superseded and terminal:
        found.append(Block(lead=f"({a.superseded} other runs of a config run more than once were left out: its latest result counts.)"))
    return [*found, *(_study(output, width, cut, judged, text) for judged, text in zip(a.claim_sections, said.claims, strict=True))]


@dataclass(frozen=True)
class _Said:
    """What every output lays out of an analysis, in words: the headline, the table's cells, the pairs'
    sentences and each claims section."""

    headline: list[str]
    table: Table
    pairs: list[str]
    claims: list[StudyText]


_SAID = "_normsweep_said"  # where an analysis keeps its words once written (not a field: not compared, not shown)


def _said(a: Analysis) -> _Said:
    """The words of `a`, written once: a report lays them out four times or more (report.md,
    report.html, the terminal, the verdict at each cut), and writing them reads the runs again each
    time. An analysis is complete when assembled and the renderers only read it (src.report.generate
    then sets the files and the run it saved them to, which no words read)."""
    said = a.__dict__.get(_SAID)
    if said is None:
        said = _Said(headline(a), table_rows(a), section_sentences(a), [written(a, s) for s in a.claim_sections])
        a.__dict__[_SAID] = said
    return said


def table_rows(a: Analysis) -> Table:
    """The per-variant table as text cells, its speed column the speed check's estimates where it has them."""
    return display_rows(a.table, a.speed.interleaved, pair_cells(a.speed_verdicts))


def _pairs(a: Analysis, sentences: list[str], output: Output, cut: Cut) -> Block:
    """The paired comparisons and the speed verdicts (`sentences`): the page under its question, the
    tests' method as its lead; the terminal with the method as its heading, only above tests that ran;
    the verdict with the method above its sentences, or their count where space is short."""
    said = sentences or [nothing_to_compare(a)]
    if output == Output.PAGE:
        return Block(PAIRS_HEADING, heading(a) + "; all pairs in `comparisons.csv`.", items=said)
    if output == Output.TERMINAL:
        tested = any(r.verdict != PairWord.UNTESTED for r in a.comparisons)
        return Block(heading(a) if tested else "", items=said)
    if cut >= Cut.PAIRS:
        said = [f"{len(sentences)} sentences on the pairs and their speed: report.md on this run"]
    return Block(lead=f"{heading(a)}:", items=[*said, *([a.code_note] if a.code_note else [])])


def _study(output: Output, width: int, cut: Cut, judged: StudySection, s: StudyText) -> Block:
    """A claims file's section (against the published study, or the user's own claims), `s` its words:
    the page's section; the terminal's lines as the section writes them (its table split to `width`);
    the verdict's as much as `cut` keeps."""
    if output == Output.TERMINAL:
        return Block(items=s.lines(width))
    if output == Output.PAGE:
        return Block(judged.file.heading, "" if s.absent else s.lead(), s.table, s.items())
    lead = "" if s.absent or cut >= Cut.TABLE else f" ({s.lead()})"
    return Block(f"**{judged.file.heading}**{lead}", table=s.table if cut < Cut.TABLE else None,
                 items=s.items() if cut < Cut.REASONS else s.short_items())  # fmt: skip
