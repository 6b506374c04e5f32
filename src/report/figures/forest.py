"""The forest plot of `speed.png` and `claims.png`: a row per estimate, its interval in the colour of its
verdict word, against zero; each figure makes its rows (labels, colours, marks) and says the rest."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from src.report.figures.style import legend_below

Mark = tuple[float, Mapping[str, object]]  # a figure beside the estimate, and its plot() keywords (marker, label...)


@dataclass(frozen=True)
class Row:
    """One estimate as drawn, in the axis' units."""

    label: str  # the y tick: what is estimated, and its word
    color: str  # the word's colour
    estimate: float
    low: float
    high: float
    marks: tuple[Mark, ...] = ()
    span: tuple[float, float] | None = None  # a band behind the row (the size a claim's words give)
    margin: float | None = None  # dotted ± ticks: the margin its equivalence is judged within
    note: str = ""  # a grey row with this note under it and no interval: an estimate not drawn here
    own: tuple[float, float, float] | None = None  # in a note's row: this sweep's reading at its own setting (estimate, low, high)


OWN = {"marker": "s", "color": "0.35", "mfc": "white", "ms": 5}  # a reading set apart from the words: grey, hollow


def draw_rows(ax: Axes, rows: Sequence[Row], view: Sequence[float] | None = None, labels: Mapping[str, str] = {}) -> None:
    """The rows on `ax`, the first on top, and zero. Within `view` (left, right) an interval that runs
    past it stops at its edge, arrowed. `labels`: the legend's words for a row's estimate, span, note."""
    for y, r in enumerate(reversed(rows)):
        lift = 0.13 if r.note else 0.0  # the note's room below the marks
        if r.span is not None:
            ax.fill_betweenx([y - 0.25 + lift, y + 0.25 + lift], *r.span, color="tab:orange", alpha=0.25, lw=0, label=labels.get("span"))
        for x, style in r.marks:
            ax.plot(x, y + lift, ls="none", **style)
        if r.note:
            ax.axhspan(y - 0.42, y + 0.42, color="0.92", lw=0, zorder=0, label=labels.get("note"))
            if r.own is not None:  # below the claim's marks, thin and grey: a reading, not the claim's test
                left, right = view or (r.own[1], r.own[2])
                ax.plot([max(r.own[1], left), min(r.own[2], right)], [y - 0.1] * 2, color=OWN["color"], lw=1)
                ax.plot(r.own[0], y - 0.1, ls="none", **OWN, label=labels.get("own"))
            ax.text(0.5, y - 0.4, textwrap.fill(r.note, 58), transform=ax.get_yaxis_transform(), ha="center", va="bottom",
                    fontsize="x-small", color="0.25", style="italic")  # fmt: skip
            continue
        for x in (-r.margin, r.margin) if r.margin is not None else ():
            ax.plot([x, x], [y - 0.35, y + 0.35], color="0.3", ls=":", lw=1)
        left, right = view or (r.low, r.high)
        ax.plot([max(r.low, left), min(r.high, right)], [y, y], color=r.color, lw=2.5, solid_capstyle="butt")
        # Caps taller than the estimate's dot: an interval narrower than the dot still shows its two ends.
        ends = [x for x in (r.low, r.high) if left <= x <= right]
        ax.plot(ends, [y] * len(ends), ls="none", marker="|", ms=13, mew=2, color=r.color)
        for end, edge, arrow in ((r.low, left, "<"), (r.high, right, ">")):
            if (end < edge) if arrow == "<" else (end > edge):
                ax.plot(edge, y, arrow, color=r.color, ms=7)
        ax.plot(r.estimate, y, "o", color=r.color, ms=6, label=labels.get("estimate"))
    if view is not None:
        ax.set_xlim(*view)
    ax.axvline(0, color="0.4", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [r.label for r in reversed(rows)], fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.grid(axis="x", alpha=0.3)


def legend(fig: Figure) -> None:
    """One legend below the panels, each label once (every row and panel labels its parts alike)."""
    found = {label: handle for ax in fig.axes for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    legend_below(fig, list(found.values()), list(found))
