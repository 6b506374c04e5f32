"""The report as one self-contained HTML page (figures embedded): MLflow's artifact viewer renders it as is."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from src.report.analysis import Analysis
from src.report.render.sections import Block, Output, blocks


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div style='overflow-x:auto'><table border=1 cellpadding=4><tr>{head}</tr>{body}</table></div>"


def _block(b: Block) -> str:
    return (
        (f"<h2>{html.escape(b.heading)}</h2>" if b.heading else "")
        + (f"<p>{html.escape(b.lead)}</p>" if b.lead else "")
        + (_table(*b.table) if b.table else "")
        + (f"<ul>{''.join(f'<li>{html.escape(s)}</li>' for s in b.items)}</ul>" if b.items else "")
    )


def html_page(analysis: Analysis, figures: list[Path]) -> str:
    """`report.html`: the same blocks as `report.md` (render.sections), then the figures."""
    name = html.escape(analysis.experiment)
    images = "".join(
        f'<h3>{html.escape(p.stem)}</h3><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures
    )
    return (
        f"<!doctype html><meta charset='utf-8'><title>normsweep: {name}</title>"
        f"<body style='font-family:sans-serif'><h1>normsweep report: {name}</h1>"
        + "".join(map(_block, blocks(analysis, Output.PAGE)))
        + f"<h2>Figures</h2>{images}</body>"
    )
