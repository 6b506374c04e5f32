"""Tables as text: Markdown for reports and files, aligned columns for a terminal; the one table writer
of the report, the benchmarks and preflight."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Aligned columns for a terminal."""
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in [headers, *rows])
