"""The learning-rate stability figure: each variant's final loss against its learning rate."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from src.report.figures.style import new_figure, variant_colors


def plot_stability(table: pd.DataFrame) -> Figure:
    """Test loss against learning rate per variant; a cross (at the top) where a run did not finish."""
    colors = variant_colors(list(dict.fromkeys(table.variant)))
    fig, (ax,) = new_figure(7, 4.5)
    finite = table.test_loss.dropna()
    top = float(finite.max()) + 0.1 * max(float(finite.max() - finite.min()), 0.1) if len(finite) else 1.0
    for variant, color in colors.items():
        rows = table[table.variant == variant]
        ax.plot(rows.lr, rows.test_loss, color=color, marker="o", ms=4, label=variant)
        broke = rows[rows.finished < rows.runs]
        ax.scatter(broke.lr, np.full(len(broke), top), color=color, marker="x", s=50, zorder=3)
        for r in broke.itertuples():
            if not math.isnan(r.stopped_at_step):
                ax.annotate(f"{int(r.stopped_at_step)}", (r.lr, top), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    ax.set_xscale("log")
    ax.set(title="Final test loss vs learning rate (x: diverged, at the step shown)", xlabel="peak learning rate",
           ylabel="test loss")  # fmt: skip
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return fig
