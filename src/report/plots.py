"""The report's figures: loss curves and throughput per variant.

Figures are built as plain `Figure` objects on an Agg canvas, never through pyplot: no global
backend switch, so the same functions serve a headless sweep and an inline notebook.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from src.report.table import variant_order
from src.stats.inference import mean_ci
from src.tracking.tags import FINISHED

CURVE_TITLES = {"train/train_loss": "train loss", "val/val_loss": "validation loss"}


def new_figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(np.atleast_1d(fig.subplots(1, ncols)))


def variant_colors(variants: list[str]) -> dict[str, tuple]:
    # One colour per variant, the same in every figure.
    palette = colormaps["tab10"]
    return {v: palette(i % 10) for i, v in enumerate(variants)}


def _loss_axis(ax: Axes, curves: pd.DataFrame, metric: str, colors: dict[str, tuple]) -> None:
    data = curves[curves.metric == metric].replace([np.inf, -np.inf], np.nan)
    for variant, color in colors.items():
        per_run = data[data.variant == variant].pivot_table(index="step", columns="run_id", values="value", dropna=False)
        if per_run.empty:
            continue
        n = per_run.shape[1]
        # Markers keep short curves (one validation, a run that diverged at once) visible.
        marker = "o" if len(per_run) <= 20 else None
        ax.plot(per_run.index, per_run.mean(axis=1), color=color, marker=marker, ms=3, label=f"{variant} (n={n})")
        if n > 1:
            ax.fill_between(per_run.index, per_run.min(axis=1), per_run.max(axis=1), color=color, alpha=0.2, lw=0)
    # A diverging run's last finite losses can be huge; keep the axis on the useful range.
    first = data.dropna().sort_values("step").groupby("run_id").value.first()
    if not first.empty and ax.get_ylim()[1] > 1.05 * float(first.max()):
        ax.set_ylim(top=1.05 * float(first.max()))
    ax.set(title=CURVE_TITLES.get(metric, metric), xlabel="optimizer step", ylabel="loss")
    ax.grid(alpha=0.3)


def plot_losses(curves: pd.DataFrame) -> Figure:
    """Train and validation loss per variant: mean over seeds, shaded min–max across seeds."""
    colors = variant_colors(variant_order(curves))
    fig, axes = new_figure(11, 4, ncols=2)
    for ax, metric in zip(axes, CURVE_TITLES, strict=True):
        _loss_axis(ax, curves, metric, colors)
    if axes[0].get_legend_handles_labels()[0]:  # runs without step metrics draw nothing
        axes[0].legend(fontsize="small")
    fig.suptitle("Loss curves (line: mean over seeds; band: min–max)")
    return fig


def plot_throughput(runs: pd.DataFrame) -> Figure:
    """Tokens/s per variant over its finished runs: bar = mean, error bar = 95% CI, dots = seeds."""
    finished = runs[runs.outcome == FINISHED]
    variants = variant_order(finished)
    colors = variant_colors(variant_order(runs))
    fig, (ax,) = new_figure(7, 4)
    for i, variant in enumerate(variants):
        values = finished.loc[finished.variant == variant, "tokens_per_sec"].to_numpy(dtype=float)
        est = mean_ci(values)
        ax.bar(i, est.mean, color=colors[variant], alpha=0.8, yerr=None if np.isnan(est.ci) else est.ci, capsize=6)
        ax.scatter(np.full(len(values), i), values, color="black", s=12, zorder=3)
    ax.set_xticks(range(len(variants)), variants, rotation=20, ha="right")
    ax.set_ylim(bottom=0)  # a 2-seed t-interval can reach below zero; throughput cannot
    ax.set(title="Throughput (bar: mean; error bar: 95% CI; dots: seeds)", ylabel="tokens/s")
    ax.grid(axis="y", alpha=0.3)
    return fig


def save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=120)
    return path
