"""The loss curves: train and validation loss per variant, mean over seeds with a min–max band (where a
variant has more than one run); a curve lying on one drawn before it has hollow marks and says so."""

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
    found = {v: data[data.variant == v].pivot_table(index="step", columns="run_id", values="value", dropna=False) for v in variants}
    return {v: per_run for v, per_run in found.items() if not per_run.empty}


# Two mean curves closer than this share of their panel's range everywhere are one line to the eye.
SAME_CURVE = 0.003


def hidden_under(curves: pd.DataFrame, variants: list[str]) -> dict[str, str]:
    """variant -> the earlier variant whose mean curves (train and validation) it lies on, within SAME_CURVE
    of each panel's range: drawn later, its line would hide the other's (hand-rolled and built-in norms
    compute nearly the same function, so a short run draws one line for both)."""
    means = {m: {v: r.mean(axis=1) for v, r in _mean_curves(curves, m, variants).items()} for m in CURVE_TITLES}
    spans = {m: np.ptp(np.concatenate([c.dropna().to_numpy() for c in found.values()])) if found else 0.0 for m, found in means.items()}

    def lies_on(v: str, other: str) -> bool:
        shared = [m for m in means if v in means[m] or other in means[m]]
        return bool(shared) and all(
            v in means[m] and other in means[m] and means[m][v].index.equals(means[m][other].index)
            and np.allclose(means[m][v], means[m][other], rtol=0, atol=SAME_CURVE * spans[m] + 1e-12, equal_nan=True)
            for m in shared
        )  # fmt: skip

    return {v: other for i, v in enumerate(variants) for other in [next((e for e in variants[:i] if lies_on(v, e)), None)] if other}


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
    """A variant's line; drawn over a curve it lies on (`over`), with larger hollow markers, so that the
    markers of the curve under it still show inside them (and its legend entry says so)."""
    return {**style.kwargs(), "ms": 7, "mfc": "none", "mew": 1.3, "lw": 1.3} if over else {**style.kwargs(), "ms": 3.5, "lw": 1.3}


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
    legend_below(fig, handles, [f"{v} (n={runs[v]}" + (f"; on {under[v]}'s curve: hollow marks)" if v in under else ")") for v in drawn])
    banded = bool(len(runs)) and int(runs.max()) > 1  # a band only where a variant has more than one run
    fig.suptitle("Loss curves (line: mean over seeds" + ("; band: min–max)" if banded else ")"))
    return fig
