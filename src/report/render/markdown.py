"""The report as Markdown: the page (`report.md`) and the verdict (the sweep run's description in MLflow)."""

from __future__ import annotations

from pathlib import Path

from src.core.tables import markdown_table
from src.report.analysis import Analysis
from src.report.judge.sequential import heading as sequential_heading
from src.report.judge.study import HEADING as STUDY_HEADING
from src.report.words.headline import HEADING as HEADLINE
from src.report.words.headline import headline
from src.tracking.summary import VERDICT_MAX


def markdown_page(analysis: Analysis, figures: list[Path]) -> str:
    """`report.md`: the table, each of `Analysis.sections`, then the figures beside it."""
    a = analysis
    parts = [
        f"# normsweep report: `{a.experiment}`",
        f"## {HEADLINE}\n\n" + "\n".join(f"- {line}" for line in headline(a)),
        f"{len(a.runs)} runs from `{a.tracking_uri}`. Cells are mean ± 95% CI (t) over finished seeds.",
        markdown_table(*a.rows()),
        *([a.code_note] if a.code_note else []),
    ]
    for heading, lead, table, items in a.sections():
        parts += [f"## {heading}", *([lead] if lead else []), *([markdown_table(*table)] if table else [])]
        parts += ["\n".join(f"- {s}" for s in items)]
    parts += ["## Figures", "\n".join(f"![{p.stem}]({p.name})" for p in figures)]
    return "\n\n".join(parts) + "\n"


# What the verdict keeps as space runs short, most first: the pairs' sentences go to report.md first,
# then the claims' reasons (their table stays), then the study's table (a word per claim stays).
LEVELS = (("sentences", "full"), ("count", "full"), ("count", "table"), ("count", "words"))


def verdict(analysis: Analysis) -> str:
    """The answer in a few lines: the headline, per variant its numbers, each pair's verdict, the study's
    claims; within MLflow's limit on a tag (VERDICT_MAX), the first of LEVELS that fits, and only when
    none does the text cut, saying so."""
    for pairs, study in LEVELS:
        text = _verdict(analysis, pairs, study)
        if len(text) <= VERDICT_MAX:
            return text
    cut = "\n\n… (cut at MLflow's limit on a run's description: report.md on this run has it all)"
    return text[: VERDICT_MAX - len(cut)] + cut


def _verdict(analysis: Analysis, pairs: str, study: str) -> str:
    a = analysis
    lines = [f"**normsweep verdict, experiment `{a.experiment}`**", "", *(f"- {line}" for line in headline(a)), ""]
    lines += ["Per variant (mean ± 95% CI over finished seeds):", "", markdown_table(*a.rows()), "", f"{a.heading()}:", ""]
    if pairs == "sentences":
        lines += [f"- {s}" for s in a.sentences()] or [f"- {a.nothing_to_compare()}"]
    else:
        lines += [f"- {len(a.sentences())} sentences on the pairs and their speed: report.md on this run"]
    lines += [f"- {a.code_note}"] if a.code_note else []
    if a.sequential:
        lines += ["", f"{sequential_heading()}:", *(f"- {v.sentence()}" for v in a.sequential)]
    lead = "" if a.study.absent or study == "words" else f" ({a.study.lead()})"
    lines += ["", f"**{STUDY_HEADING}**{lead}:"]
    if study != "words" and a.study.table:
        lines += ["", markdown_table(*a.study.table), ""]
    lines += [f"- {s}" for s in (a.study.items() if study == "full" else a.study.short_items())]
    return "\n".join([*lines, *_figures(a)])


SHOWN_FIGURES = ("speed.png", "claims.png")  # drawn in the description; the rest are in report.html


def _figures(a: Analysis) -> list[str]:
    """The description's figures, read from the sweep run's own artifacts by the UI's artifact address
    (relative: it holds behind any host or prefix the UI is served at)."""
    if a.report_run_id is None:
        return []
    names = [p.name for p in a.files if p.name in SHOWN_FIGURES]
    return ["", *(f"![{n}](get-artifact?path=report%2F{n}&run_uuid={a.report_run_id})" for n in names)]
