"""The report for a terminal: the aligned table, one sentence per comparison, then the published study's claims.

Every line fits a terminal (src.core.terminal.WIDTH): sentences wrap, tables split their columns;
the whole text of each is in report.md and report.html.
"""

from __future__ import annotations

from src.core.tables import text_table
from src.core.terminal import WIDTH, fit
from src.report.analysis import Analysis
from src.report.render.sections import Output, blocks
from src.tracking.ui_view import ui_link


def terminal_text(analysis: Analysis, width: int = WIDTH) -> str:
    """What `python -m src.report` and the end of a sweep print, no line longer than `width`: the
    blocks (render.sections) a blank line apart, a heading ending in a colon."""
    lines = [f"normsweep report: experiment {analysis.experiment!r} ({len(analysis.runs)} runs)"]
    for b in blocks(analysis, Output.TERMINAL, width):
        lines += ["", *([f"{b.heading}:"] if b.heading else []), *([b.lead] if b.lead else [])]
        lines += [text_table(*b.table, width=width)] if b.table else []
        lines += [f"  {s}" if b.listed else s for s in b.items]
    return "\n".join(fit(lines, width))


def ui_links(a: Analysis, base: str) -> list[str]:
    """Where to look in the MLflow UI at `base`: the sweep run (its verdict), then every run."""
    links = [f"the sweep's verdict: {ui_link(base, a.experiment_id, a.report_run_id)}"] if a.report_run_id else []
    return [*links, f"every run, grouped by variant: {ui_link(base, a.experiment_id)}"]


def links_text(title: str, links: list[str], width: int = WIDTH) -> str:
    """`title`, then one indented line per `label: address` link, each address on a line of its own
    where the two do not fit together."""
    return "\n".join(fit([title, *(f"  {link}" for link in links)], width))
