"""The report as one self-contained HTML page (figures embedded): MLflow's artifact viewer renders it as is."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from src.report.analysis import Analysis
from src.report.words.headline import HEADING as HEADLINE
from src.report.words.headline import headline


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div style='overflow-x:auto'><table border=1 cellpadding=4><tr>{head}</tr>{body}</table></div>"


def html_page(analysis: Analysis, figures: list[Path]) -> str:
    """`report.html`: the same table and `Analysis.sections` as `report.md`, then the figures."""
    sections = "".join(
        f"<h2>{html.escape(heading)}</h2>"
        + (f"<p>{html.escape(lead)}</p>" if lead else "")
        + (_table(*table) if table else "")
        + "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in items) + "</ul>"
        for heading, lead, table, items in analysis.sections()
    )  # fmt: skip
    images = "".join(
        f'<h3>{html.escape(p.stem)}</h3><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures
    )
    return (
        f"<!doctype html><meta charset='utf-8'><title>normsweep: {html.escape(analysis.experiment)}</title>"
        f"<body style='font-family:sans-serif'><h1>normsweep report: {html.escape(analysis.experiment)}</h1>"
        f"<h2>{HEADLINE}</h2><ul>{''.join(f'<li>{html.escape(line)}</li>' for line in headline(analysis))}</ul>"
        f"<p>{len(analysis.runs)} runs. Cells are mean ± 95% CI over finished seeds.</p>"
        f"{_table(*analysis.rows())}"
        f"{f'<p>{html.escape(analysis.code_note)}</p>' if analysis.code_note else ''}"
        f"{sections}"
        f"<h2>Figures</h2>{images}</body>"
    )
