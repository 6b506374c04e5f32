"""The report as one self-contained HTML page (figures embedded): MLflow's artifact viewer renders it as is."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from src.report.analysis import Analysis
from src.report.render.sections import Block, Output, blocks


def _text(s: str) -> str:
    """A sentence of the report as HTML: escaped, its `code` spans (Markdown's, as report.md and the
    sweep run's description write them) as <code>; the page showed the backticks. An unpaired one stays."""
    parts = html.escape(s).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: no spans to tell
        return "`".join(parts)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_text(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_text(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div style='overflow-x:auto'><table border=1 cellpadding=4><tr>{head}</tr>{body}</table></div>"


def _block(b: Block) -> str:
    return (
        (f"<h2>{_text(b.heading)}</h2>" if b.heading else "")
        + (f"<p>{_text(b.lead)}</p>" if b.lead else "")
        + (_table(*b.table) if b.table else "")
        + (f"<ul>{''.join(f'<li>{_text(s)}</li>' for s in b.items)}</ul>" if b.items else "")
    )


STYLE = "code{background:#f2f2f2;padding:0 .2em;border-radius:3px}"


def html_page(analysis: Analysis, figures: list[Path]) -> str:
    """`report.html`: the same blocks as `report.md` (render.sections), then the figures."""
    name = html.escape(analysis.experiment)
    images = "".join(
        f'<h3>{html.escape(p.stem)}</h3><img alt="{html.escape(p.stem)}" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures
    )
    return (
        f"<!doctype html><meta charset='utf-8'><title>normsweep: {name}</title><style>{STYLE}</style>"
        f"<body style='font-family:sans-serif'><h1>normsweep report: {name}</h1>"
        + "".join(map(_block, blocks(analysis, Output.PAGE)))
        + f"<h2>Figures</h2>{images}</body>"
    )
