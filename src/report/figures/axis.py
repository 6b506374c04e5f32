"""`by_<axis>.png`: final test loss against the one numeric value a sweep varied (what it draws:
docs/zoo.md). When the runs vary along a single axis whose values are numbers (a learning rate, a
width), the variants are points on a line, not names: 30 legend entries `lr=…` hide what the sweep
asks, where the loss is lowest and where training breaks; and every run that did not finish is
drawn, so none is silently left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from src.report.figures.style import blank_figure
from src.report.read.table import AXIS_PREFIX
from src.stats.inference import mean_ci
from src.tracking.tags import DIVERGED, FINISHED
from src.tracking.variants import Axis

LOG_SPAN = 10.0  # values spanning more than a decade are drawn on a log axis
MARKED_TICKS = 10  # up to this many values, each gets its own tick and label
UNFINISHED = {DIVERGED: ("x", "tab:red")}  # outcome -> marker, colour in the strip; others:
OTHER = ("s", "0.4")


def axis_values(runs: pd.DataFrame, axis: Axis) -> pd.Series | None:
    """Each run's value on `axis` as a number; None when a run has none or one is not a finite number."""
    column = f"{AXIS_PREFIX}{axis.name}"
    if column not in runs or not len(runs):
        return None
    values = pd.to_numeric(runs[column].astype(str), errors="coerce")
    return values.astype(float) if bool(np.isfinite(values).all()) else None


def numeric_axis(runs: pd.DataFrame, axes: Sequence[Axis]) -> Axis | None:
    """The axis to draw the variants along: the only one the runs vary, when all its values are
    numbers with two or more distinct. Two axes would need a line per value of the other, and a
    variant with no number (a norm, a flag) has no place on it."""
    if len(axes) != 1:
        return None
    values = axis_values(runs, axes[0])
    return axes[0] if values is not None and values.nunique() > 1 else None


def file_name(axis: Axis) -> str:
    """`by_optim_lr.png` for `optim.lr`: the axis's name made a plain file name."""
    return f"by_{re.sub(r'[^A-Za-z0-9]+', '_', axis.name).strip('_') or 'axis'}.png"


def _finished(ax: Axes, runs: pd.DataFrame, x: pd.Series) -> None:
    """Mean of the finished seeds per value with its 95% interval, and each seed as a dot."""
    ok = (runs.outcome == FINISHED) & np.isfinite(runs.test_loss.astype(float))
    losses = runs.test_loss.astype(float)[ok]
    ax.scatter(x[ok], losses, s=14, color="0.35", alpha=0.7, zorder=3, label="a seed")
    means = [(value, mean_ci(losses[x[ok] == value].tolist())) for value in sorted(x[ok].unique())]
    if means:
        xs, est = zip(*means, strict=True)
        yerr = [0.0 if math.isnan(e.ci) else e.ci for e in est]
        ax.errorbar(xs, [e.mean for e in est], yerr=yerr, color="tab:blue", marker="o", ms=5, capsize=3, lw=1.5,
                    zorder=2, label="mean over finished seeds, 95% CI")  # fmt: skip
    else:
        ax.text(0.5, 0.5, "no run finished", transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.set_ylabel("final test loss")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize="small")


def _unfinished(ax: Axes, runs: pd.DataFrame, x: pd.Series) -> None:
    """One row per outcome (diverged, failed, ...): a mark at each value where a run ended so, with
    the step it stopped at (the earliest, and how many seeds, when several)."""
    left = runs[runs.outcome != FINISHED].assign(x=x)
    outcomes = list(dict.fromkeys(sorted(left.outcome, key=lambda o: (o != DIVERGED, o))))
    for row, outcome in enumerate(outcomes):
        marker, color = UNFINISHED.get(outcome, OTHER)
        for value, group in left[left.outcome == outcome].groupby("x"):
            ax.plot(value, row, marker, color=color, ms=7, mew=2)
            stopped = group.stopped_at_step.dropna()
            text = f"{int(stopped.min())}" if len(stopped) else "?"
            text += f" ({len(group)} seeds)" if len(group) > 1 else ""
            ax.annotate(text, (value, row), xytext=(0, 7), textcoords="offset points", rotation=90, ha="center",
                        va="bottom", fontsize=7, color=color)  # fmt: skip
    ax.set_yticks(range(len(outcomes)), outcomes, fontsize="small")
    ax.set_ylim(-0.6, len(outcomes) + 0.9)  # room above the last row for its step labels
    ax.set_title("did not finish (number: the step it stopped at)", fontsize="small", loc="left")
    ax.grid(axis="x", alpha=0.3, which="both")
    ax.tick_params(axis="x", labelbottom=False)


def plot_by_axis(runs: pd.DataFrame, axis: Axis) -> Figure:
    """Final test loss against the axis's value (`numeric_axis` chose it): see the module's doc."""
    x = axis_values(runs, axis)
    if x is None:
        raise ValueError(f"the runs' values on {axis.name} are not all numbers")
    left = bool((runs.outcome != FINISHED).any())
    fig = blank_figure(9, 5.2 + (1.2 if left else 0))
    if left:
        strip, ax = fig.subplots(2, 1, sharex=True, height_ratios=[1, 4])
        _unfinished(strip, runs, x)
    else:
        ax = fig.subplots()
    log = bool((x > 0).all()) and float(x.max()) > LOG_SPAN * float(x.min())
    ax.set_xscale("log" if log else "linear")
    _finished(ax, runs, x)
    values = sorted(x.unique())
    if len(values) <= MARKED_TICKS:  # a few values: each one marked, as the sweep wrote it
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()
    ax.set_xlabel(f"{axis.name}{' (log scale)' if log else ''}")
    seeds = runs.seed.nunique() if "seed" in runs else 1
    fig.suptitle(f"Final test loss vs {axis.name}: {len(values)} values, {len(runs)} runs ({seeds} seed(s))")
    return fig
