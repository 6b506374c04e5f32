"""The forest plot both `speed.png` and `claims.png` draw: one row per estimate, its interval in the
colour of its verdict word, against zero and the band of what "equivalent" means.

A figure turns its judgements into `Row`s (its labels, colours and which rows) and `draw_rows` draws
them on an axes, the first row on top; what each figure says around them (titles, its own notes)
stays in its own module.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from src.report.figures.style import legend_below

NOTE_WIDTH = 58  # characters per line of a row's note, under the row
LIFT = 0.13  # how far a row with a note lifts its marks, to leave the note room below them


@dataclass(frozen=True)
class Mark:
    """A figure beside the estimate (the study's; a second measurement), with how it is drawn."""

    x: float
    style: Mapping[str, object]  # matplotlib plot() keywords: marker, colours, size, label, zorder


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
    margin: float | None = None  # dotted ± ticks: the margin this row's equivalence is judged within
    note: str = ""  # a grey row with this note under it, and no interval: an estimate that cannot be drawn here


@dataclass(frozen=True)
class Band:
    """A band across every row: the ±margin that "equivalent" means."""

    low: float
    high: float
    label: str
    color: str = "tab:green"


@dataclass(frozen=True)
class Labels:
    """The legend's words for the parts of a row (None: not in the legend)."""

    estimate: str | None = None
    span: str | None = None
    note: str | None = None


def draw_rows(ax: Axes, rows: Sequence[Row], view: tuple[float, float] | None = None, band: Band | None = None,
              labels: Labels = Labels()) -> None:  # fmt: skip
    """The rows on `ax`, first on top, with zero and `band`. Within `view` (left, right), an interval
    that runs past it stops at its edge, arrowed; without one the axis fits every interval."""
    if band is not None:
        ax.axvspan(band.low, band.high, color=band.color, alpha=0.1, lw=0, label=band.label)
    for y, r in enumerate(reversed(rows)):
        lift = LIFT if r.note else 0.0
        if r.span is not None:
            ax.fill_betweenx([y - 0.25 + lift, y + 0.25 + lift], *r.span, color="tab:orange", alpha=0.25, lw=0, label=labels.span)
        for mark in r.marks:
            ax.plot(mark.x, y + lift, **mark.style)
        if r.note:
            ax.axhspan(y - 0.42, y + 0.42, color="0.92", lw=0, zorder=0, label=labels.note)
            ax.text(0.5, y - 0.4, textwrap.fill(r.note, NOTE_WIDTH), transform=ax.get_yaxis_transform(), ha="center", va="bottom",
                    fontsize="x-small", color="0.25", style="italic")  # fmt: skip
            continue
        if r.margin is not None:
            for x in (-r.margin, r.margin):
                ax.plot([x, x], [y - 0.35, y + 0.35], color="0.3", ls=":", lw=1)
        left, right = view or (r.low, r.high)
        ax.plot([max(r.low, left), min(r.high, right)], [y, y], color=r.color, lw=2.5, solid_capstyle="butt")
        if r.low < left:
            ax.plot(left, y, "<", color=r.color, ms=7)
        if r.high > right:
            ax.plot(right, y, ">", color=r.color, ms=7)
        ax.plot(r.estimate, y, "o", color=r.color, ms=6, label=labels.estimate)
    if view is not None:
        ax.set_xlim(*view)
    ax.axvline(0, color="0.4", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [r.label for r in reversed(rows)], fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.grid(axis="x", alpha=0.3)


def legend(fig: Figure) -> None:
    """One legend under the panels, each label once (every row and panel labels its parts alike)."""
    found = {label: handle for ax in fig.axes for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    legend_below(fig, list(found.values()), list(found))
