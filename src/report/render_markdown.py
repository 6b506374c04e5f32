"""The report as Markdown: the page (`report.md`) and the verdict (the sweep run's description in MLflow)."""

from __future__ import annotations

from pathlib import Path

from src.core.tables import markdown_table
from src.report.against_study import HEADING as STUDY_HEADING
from src.report.analysis import Analysis
from src.report.headline import HEADING as HEADLINE
from src.report.headline import headline
from src.report.sequential_verdicts import heading as sequential_heading
from src.report.table import with_ci
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


def verdict(analysis: Analysis) -> str:
    """The answer in a few lines: the headline, per variant its numbers, each pair's verdict, the study's
    claims; within MLflow's limit on a tag (VERDICT_MAX), the pairs' sentences left to report.md first,
    then the study's section shortened to a word per claim, and only then the text cut, saying so."""
    text = _verdict(analysis, full=True)
    if len(text) > VERDICT_MAX:  # the pairs' sentences stay in report.md: the headline sums them up
        text = _verdict(analysis, full=True, pairs=False)
    if len(text) > VERDICT_MAX:
        text = _verdict(analysis, full=False, pairs=False)
    if len(text) > VERDICT_MAX:
        cut = "\n\n… (cut at MLflow's limit on a run's description: report.md on this run has it all)"
        text = text[: VERDICT_MAX - len(cut)] + cut
    return text


def _verdict(analysis: Analysis, full: bool, pairs: bool = True) -> str:
    a = analysis
    lines = [f"**normsweep verdict, experiment `{a.experiment}`**", "", *(f"- {line}" for line in headline(a)), ""]
    lines += [f"Per variant ({a.heading()}):", ""]
    for r in a.table.itertuples(index=False):
        loss = with_ci(r.test_loss, r.test_loss_ci, "{:.4f}")
        speed = with_ci(r.tokens_per_sec, r.tokens_per_sec_ci, "{:,.0f}")
        notes = f"; {r.notes}" if r.notes else ""
        lines.append(f"- `{r.variant}`: test loss {loss}, {speed} tokens/s ({r.finished} seed(s) finished{notes})")
    if pairs:
        lines += [f"- {s}" for s in a.sentences()] or [f"- {a.nothing_to_compare()}"]
    else:
        lines += [f"- {len(a.sentences())} sentences on the pairs and their speed: report.md on this run"]
    lines += [f"- {a.code_note}"] if a.code_note else []
    if a.sequential:
        lines += ["", f"{sequential_heading()}:", *(f"- {v.sentence()}" for v in a.sequential)]
    if not full:
        return "\n".join([*lines, "", f"**{STUDY_HEADING}**:", *(f"- {s}" for s in a.study.short_items())])
    lines += ["", f"**{STUDY_HEADING}**" + ("" if a.study.absent else f" ({a.study.lead()})") + ":"]
    lines += ["", markdown_table(*a.study.table), ""] if a.study.table else []
    lines += [f"- {s}" for s in a.study.items()]
    return "\n".join(lines)
