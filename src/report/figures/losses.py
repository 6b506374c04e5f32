"""The loss curves: train and validation loss per variant, mean over seeds with a min–max band (where a
variant has more than one run); a curve identical to one drawn before it is dashed and says so."""

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


def _mean_curves(curves: pd.DataFrame, metric: str, variants: list[str]) -> dict[str, pd.DataFrame]:
    """variant -> its runs' values of `metric` by step (a column per run), for the variants that have any."""
    data = curves[curves.metric == metric].replace([np.inf, -np.inf], np.nan)
    out = {}
    for variant in variants:
        per_run = data[data.variant == variant].pivot_table(index="step", columns="run_id", values="value", dropna=False)
        if not per_run.empty:
            out[variant] = per_run
    return out


def hidden_under(curves: pd.DataFrame, variants: list[str]) -> dict[str, str]:
    """variant -> the earlier variant whose mean curves (train and validation) it repeats to 1e-9: drawn
    later, its line would hide the other's (hand-rolled and built-in norms are the same function, so a
    short run gives the same curve)."""
    means = {m: {v: r.mean(axis=1) for v, r in _mean_curves(curves, m, variants).items()} for m in CURVE_TITLES}
    found: dict[str, str] = {}
    for i, v in enumerate(variants):
        for earlier in variants[:i]:
            same = [m for m in means if v in means[m] or earlier in means[m]]
            if same and all(
                v in means[m] and earlier in means[m] and means[m][v].index.equals(means[m][earlier].index)
                and np.allclose(means[m][v], means[m][earlier], rtol=0, atol=1e-9, equal_nan=True) for m in same
            ):  # fmt: skip
                found[v] = earlier
                break
    return found


def _loss_axis(ax: Axes, curves: pd.DataFrame, metric: str, styles: dict[str, Style], under: dict[str, str]) -> None:
    data = curves[curves.metric == metric].replace([np.inf, -np.inf], np.nan)
    band = 0.2 if len(styles) <= PALETTE.N else 0.08  # bands of many variants would bury the lines
    for variant, per_run in _mean_curves(curves, metric, list(styles)).items():
        # Markers keep short curves (one validation, a run that diverged at once) visible; sparse on long ones.
        ax.plot(per_run.index, per_run.mean(axis=1), **_drawn(styles[variant], variant in under), markevery=max(1, len(per_run) // 10))
        if per_run.shape[1] > 1:
            ax.fill_between(per_run.index, per_run.min(axis=1), per_run.max(axis=1), color=styles[variant].color, alpha=band, lw=0)
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


def _drawn(style: Style, over: bool) -> dict[str, object]:
    """A variant's line; drawn over an identical curve (`over`), dashed with hollow markers, so that the
    curve under it still shows between its dashes and through its markers."""
    if not over:
        return {**style.kwargs(), "ms": 3.5, "lw": 1.3}
    return {**style.kwargs(), "linestyle": (0, (3, 3)), "mfc": "none", "ms": 6, "lw": 1.6}


def plot_losses(curves: pd.DataFrame) -> Figure:
    """Train and validation loss per variant: mean over seeds, shaded min–max across seeds; one
    legend entry per variant, below both panels."""
    styles = variant_styles(variant_order(curves))
    fig, axes = new_figure(11, 4, ncols=2)
    drawn = [v for v in styles if curves[curves.variant == v].metric.isin(list(CURVE_TITLES)).any()]
    under = hidden_under(curves, drawn)
    for ax, metric in zip(axes, CURVE_TITLES, strict=True):
        _loss_axis(ax, curves, metric, styles, under)
    runs = curves.groupby("variant").run_id.nunique() if len(curves) else pd.Series(dtype=int)
    handles = [Line2D([], [], **_drawn(styles[v], v in under)) for v in drawn]
    # runs without step metrics draw nothing; a curve drawn over an identical one says so in its label
    legend_below(fig, handles, [f"{v} (n={runs[v]}" + (f"; same curve as {under[v]}: drawn over it)" if v in under else ")") for v in drawn])
    banded = bool(len(runs)) and int(runs.max()) > 1  # a band only where a variant has more than one run
    fig.suptitle("Loss curves (line: mean over seeds" + ("; band: min–max)" if banded else ")"))
    return fig
