"""The report for a terminal: the aligned table, one sentence per comparison, then the published study's claims.

Every line fits a terminal (src.core.terminal.WIDTH): sentences wrap, tables split their columns;
the whole text of each is in report.md and report.html.
"""

from __future__ import annotations

from src.core.tables import text_table
from src.core.terminal import WIDTH, fit
from src.report.analysis import Analysis
from src.report.judge.sequential import heading as sequential_heading
from src.report.judge.stability import sentences as stability_sentences
from src.report.words.headline import HEADING as HEADLINE
from src.report.words.headline import headline
from src.stats.verdicts import PairWord


def terminal_text(analysis: Analysis, width: int = WIDTH) -> str:
    """What `python -m src.report` and the end of a sweep print, no line longer than `width`."""
    a = analysis
    lines = [f"normsweep report: experiment {a.experiment!r} ({len(a.runs)} runs)", ""]
    lines += [f"{HEADLINE}:", *(f"  {line}" for line in headline(a)), ""]
    lines += [text_table(*a.rows(), width=width), ""]
    lines += [a.code_note, ""] if a.code_note else []
    if a.comparisons or a.notes:
        # The tests' heading only above tests that ran: pairs short of seeds are said in one sentence.
        tested = any(r.verdict != PairWord.UNTESTED for r in a.comparisons)
        lines += [f"{a.heading()}:"] if tested else []
        lines += a.sentences()
    else:
        lines += [a.nothing_to_compare()]
    if a.sequential:
        lines += ["", f"{sequential_heading()}:", *(f"  {v.sentence()}" for v in a.sequential)]
    if a.stability is not None:
        lines += ["", *stability_sentences(a.stability, a.sensitivity)]
    if a.superseded:
        lines += ["", f"({a.superseded} other runs of a config run more than once were left out: its latest result counts.)"]
    lines += ["", *a.study.lines(width)]  # last: what a sweep ends with
    return "\n".join(fit(lines, width))


def links_text(title: str, links: list[str], width: int = WIDTH) -> str:
    """`title`, then one indented line per `label: address` link, each address on a line of its own
    where the two do not fit together."""
    return "\n".join(fit([title, *(f"  {link}" for link in links)], width))
