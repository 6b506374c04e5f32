"""Tables as text: Markdown for reports and files, aligned columns for a terminal; the one table writer
of the report, the benchmarks and preflight."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


GAP = "  "  # between two columns of a terminal table
COLUMN_MAX = 60  # a fitted table's widest column: a long cell wraps so that two or three sit side by side


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Aligned columns for a terminal. With `width`, no line is longer: a cell wider than a column may
    be is wrapped over lines of its own row, and columns that do not fit beside each other go to a
    next block of the table, each block led by the first column (what names the row)."""
    table = [[str(c) for c in line] for line in [headers, *rows]]
    if width is None:
        return _block(table, list(range(len(headers))))
    first = max(len(line[0]) for line in table)
    room = max(width - first - len(GAP), 1)  # any one column fits beside the first
    # A header is kept whole where it fits (what the column holds, said once); a long cell wraps sooner.
    table = [[line[0], *(_wrapped(c, room if i == 0 else min(room, COLUMN_MAX)) for c in line[1:])] for i, line in enumerate(table)]
    blocks: list[list[int]] = []
    used = width + 1
    for i in range(1, len(headers)):
        own = max(len(part) for line in table for part in line[i].split("\n")) + len(GAP)
        if used + own > width:
            blocks.append([0])
            used = first
        blocks[-1].append(i)
        used += own
    return "\n\n".join(_block(table, columns) for columns in blocks or [[0]])


def _wrapped(cell: str, width: int) -> str:
    """A cell over lines of at most `width` characters (kept whole when it fits)."""
    if len(cell) <= width:
        return cell
    return "\n".join(textwrap.wrap(cell, width, break_on_hyphens=False)) or cell


def _block(table: list[list[str]], columns: list[int]) -> str:
    """The `columns` of `table` aligned; a row whose cells span lines takes as many lines."""
    widths = [max(len(part) for line in table for part in line[i].split("\n")) for i in columns]
    out = []
    for line in table:
        parts = [line[i].split("\n") for i in columns]
        for k in range(max(len(p) for p in parts)):
            cells = [(p[k] if k < len(p) else "").ljust(w) for p, w in zip(parts, widths, strict=True)]
            out.append(GAP.join(cells).rstrip())
    return "\n".join(out)
