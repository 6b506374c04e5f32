"""The report's loss curves, and the pieces every figure shares: the canvas, each variant's style,
and a legend that stays outside the axes.

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
import pandas as pd
from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from src.report.table import variant_order

CURVE_TITLES = {"train/train_loss": "train loss", "val/val_loss": "validation loss"}
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


def _loss_axis(ax: Axes, curves: pd.DataFrame, metric: str, styles: dict[str, Style]) -> None:
    data = curves[curves.metric == metric].replace([np.inf, -np.inf], np.nan)
    band = 0.2 if len(styles) <= PALETTE.N else 0.08  # bands of many variants would bury the lines
    for variant, style in styles.items():
        per_run = data[data.variant == variant].pivot_table(index="step", columns="run_id", values="value", dropna=False)
        if per_run.empty:
            continue
        # Markers keep short curves (one validation, a run that diverged at once) visible; sparse on long ones.
        ax.plot(per_run.index, per_run.mean(axis=1), **style.kwargs(), ms=3.5, markevery=max(1, len(per_run) // 10), lw=1.3)
        if per_run.shape[1] > 1:
            ax.fill_between(per_run.index, per_run.min(axis=1), per_run.max(axis=1), color=style.color, alpha=band, lw=0)
    # A diverging run's last finite losses can be huge; keep the axis on the useful range.
    first = data.dropna().sort_values("step").groupby("run_id").value.first()
    if not first.empty and ax.get_ylim()[1] > 1.05 * float(first.max()):
        ax.set_ylim(top=1.05 * float(first.max()))
    ax.set(title=CURVE_TITLES.get(metric, metric), xlabel="optimizer step", ylabel="loss")
    steps = sorted(data.step.unique())
    if 0 < len(steps) <= 10:  # steps are whole: each one marked, not 1.975 around a single validation
        ax.set_xticks(steps, [f"{s:g}" for s in steps])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)  # losses read as themselves, not as +1.079e1 offsets
    ax.grid(alpha=0.3)


def plot_losses(curves: pd.DataFrame) -> Figure:
    """Train and validation loss per variant: mean over seeds, shaded min–max across seeds; one
    legend entry per variant, below both panels."""
    styles = variant_styles(variant_order(curves))
    fig, axes = new_figure(11, 4, ncols=2)
    for ax, metric in zip(axes, CURVE_TITLES, strict=True):
        _loss_axis(ax, curves, metric, styles)
    drawn = [v for v in styles if curves[curves.variant == v].metric.isin(list(CURVE_TITLES)).any()]
    runs = curves.groupby("variant").run_id.nunique() if len(curves) else pd.Series(dtype=int)
    handles = [Line2D([], [], **styles[v].kwargs(), ms=3.5, lw=1.3) for v in drawn]
    legend_below(fig, handles, [f"{v} (n={runs[v]})" for v in drawn])  # runs without step metrics draw nothing
    fig.suptitle("Loss curves (line: mean over seeds; band: min–max)")
    return fig


def save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=120)
    return path
