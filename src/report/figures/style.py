"""The pieces every figure shares: the canvas, each variant's style, and a legend that stays
outside the axes.

Figures are built as plain `Figure` objects on an Agg canvas, never through pyplot: no global
backend switch, so the same functions serve a headless sweep and an inline notebook.

A sweep can hold dozens of variants (30 learning rates): ten colours alone repeat, and a legend
inside the axes covers the curves and is cut at the figure's edge. So each variant gets a (colour,
line style, marker) triple of its own, and the legend goes below the panels, in as many columns as
its labels fit, the figure growing by its rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

PALETTE = colormaps["tab10"]  # ten colours told apart by most eyes, colour-blind ones included
# Cycled together per block of ten variants (4 and 5 entries: the triples repeat only after 200
# variants); a marker tells apart the curves of one point, where a line style cannot show.
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v")
LEGEND_FONT = "small"
# Legend geometry, in font sizes (matplotlib's defaults but a longer handle, so dotted and dash-dot differ).
HANDLE_EM, HANDLE_PAD_EM, COLUMN_GAP_EM, ROW_EM = 3.0, 0.8, 2.0, 1.6


@dataclass(frozen=True)
class Style:
    """How one variant is drawn, the same in every figure."""

    color: tuple[float, float, float, float]
    linestyle: str
    marker: str

    def kwargs(self) -> dict[str, object]:
        return {"color": self.color, "linestyle": self.linestyle, "marker": self.marker}


def blank_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no pyplot), laid out by constrained layout; no axes yet."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def new_figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = blank_figure(width, height)
    return fig, list(np.atleast_1d(fig.subplots(1, ncols)))


def variant_styles(variants: Sequence[str]) -> dict[str, Style]:
    """A style per variant, in order: the first ten differ by colour alone (solid, round markers),
    each further ten by line style and marker as well."""
    styles = {}
    for i, variant in enumerate(variants):
        block = i // PALETTE.N
        styles[variant] = Style(PALETTE(i % PALETTE.N), LINESTYLES[block % len(LINESTYLES)], MARKERS[block % len(MARKERS)])
    return styles


def variant_colors(variants: Sequence[str]) -> dict[str, tuple]:
    """One colour per variant, the same as its style's (figures that draw no lines per variant)."""
    return {v: s.color for v, s in variant_styles(variants).items()}


# The runs that are no variant (a sweep's parent run, its speed check) in the MLflow UI: a grey no variant's
# colour is, so that no job shares a colour with them.
NOT_A_VARIANT = "#7f7f7f"


def variant_hex(variants: Sequence[str]) -> dict[str, str]:
    """Each variant's colour as `#rrggbb`: the one the report's figures draw it in (its runs' colour in
    MLflow's UI, `mlflow.runColor`), never NOT_A_VARIANT (tab10's grey is skipped for it)."""
    found = {v: to_hex(c) for v, c in variant_colors(variants).items()}
    return {v: "#5a5a5a" if h == NOT_A_VARIANT else h for v, h in found.items()}


def legend_below(fig: Figure, handles: Sequence[Artist], labels: Sequence[str]) -> None:
    """The legend under the axes, in columns that fit the figure's width; the figure grows by its
    rows, so that constrained layout can place it without covering or cutting anything."""
    if not handles:
        return
    em = FontProperties(size=LEGEND_FONT).get_size_in_points() / 72  # inches
    renderer = fig.canvas.get_renderer()
    widest = max(renderer.get_text_width_height_descent(t, FontProperties(size=LEGEND_FONT), ismath=False)[0] for t in labels)
    column = widest / fig.dpi + (HANDLE_EM + HANDLE_PAD_EM + COLUMN_GAP_EM) * em
    width, height = fig.get_size_inches()
    ncols = max(1, min(len(labels), int((width - 4 * em) // column)))
    rows = math.ceil(len(labels) / ncols)
    ncols = math.ceil(len(labels) / rows)  # as few columns as the same rows need: balanced
    fig.set_size_inches(width, height + rows * ROW_EM * em + 4 * em)
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=LEGEND_FONT, handlelength=HANDLE_EM)


DPI = 120
# The widest a figure shown in the sweep run's description may be, in pixels: MLflow's UI draws an image
# there at its own size (its sanitizer drops a width), beside *About this run*'s 440 px column, so in a
# 1440 px window the description has ~740 px; a wider figure (claims.png's two panels side by side: 1,680)
# widened the description past the window and cut its sentences mid-word.
DESCRIPTION_WIDTH_PX = 720


def save(fig: Figure, path: Path, max_width_px: float | None = None) -> Path:
    """The figure as a PNG at DPI, or, where `max_width_px` is given, at the resolution that keeps it that
    wide (the same drawing, smaller)."""
    width = fig.get_size_inches()[0]
    fig.savefig(path, dpi=min(DPI, max_width_px / width) if max_width_px else DPI)
    return path
