"""The loss curves: train and validation loss per variant, mean over seeds with a min–max band."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from src.report.figures.style import PALETTE, Style, legend_below, new_figure, variant_styles
from src.report.read.table import variant_order

CURVE_TITLES = {"train/train_loss": "train loss", "val/val_loss": "validation loss"}


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
