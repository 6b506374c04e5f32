"""The report as Markdown: the page (`report.md`) and the verdict (the sweep run's description in MLflow)."""

from __future__ import annotations

from pathlib import Path

from src.core.tables import markdown_table
from src.report.analysis import Analysis
from src.report.render.sections import Block, Cut, Output, blocks
from src.tracking.summary import VERDICT_MAX


def markdown_page(analysis: Analysis, figures: list[Path]) -> str:
    """`report.md`: the headline, the table, each section under its heading, then the figures beside it."""
    parts = [f"# normsweep report: `{analysis.experiment}`"]
    for b in blocks(analysis, Output.PAGE):
        parts += [f"## {b.heading}"] if b.heading else []
        parts += [b.lead] if b.lead else []
        parts += [markdown_table(*b.table)] if b.table else []
        parts += ["\n".join(f"- {s}" for s in b.items)] if b.items else []
    parts += ["## Figures", "\n".join(f"![{p.stem}]({p.name})" for p in figures)]
    return "\n\n".join(parts) + "\n"


def verdict(analysis: Analysis) -> str:
    """The answer in a few lines: the headline, per variant its numbers, each pair's verdict, the study's
    claims; within MLflow's limit on a tag (VERDICT_MAX), the first `Cut` that fits, and only when
    none does the text cut, saying so."""
    for cut in Cut:
        text = _verdict(analysis, cut)
        if len(text) <= VERDICT_MAX:
            return text
    cut = "\n\n… (cut at MLflow's limit on a run's description: report.md on this run has it all)"
    return text[: VERDICT_MAX - len(cut)] + cut


def _verdict(analysis: Analysis, cut: Cut) -> str:
    """The verdict at one level: its blocks a blank line apart, each heading right above its bullets."""
    lines = [f"**normsweep verdict, experiment `{analysis.experiment}`**"]
    for b in blocks(analysis, Output.VERDICT, cut=cut):
        lines += ["", *_compact(b)]
    return "\n".join([*lines, *_figures(analysis)])


def _compact(b: Block) -> list[str]:
    """A block in few lines: its heading on its items, a lead and a table set apart by blank lines."""
    lines = [f"{b.heading}:"] if b.heading else []
    lines += [b.lead, ""] if b.lead else []
    lines += ["", markdown_table(*b.table), ""] if b.table else []
    lines += [f"- {s}" for s in b.items]
    return lines[:-1] if lines[-1:] == [""] else lines


SHOWN_FIGURES = ("speed.png", "claims.png")  # drawn in the description; the rest are in report.html


def _figures(a: Analysis) -> list[str]:
    """The description's figures, read from the sweep run's own artifacts by the UI's artifact address
    (relative: it holds behind any host or prefix the UI is served at)."""
    if a.report_run_id is None:
        return []
    names = [p.name for p in a.files if p.name in SHOWN_FIGURES]
    return ["", *(f"![{n}](get-artifact?path=report%2F{n}&run_uuid={a.report_run_id})" for n in names)]
