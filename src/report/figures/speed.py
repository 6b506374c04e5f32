"""`speed.png`: each pair's speed estimate, the one its verdict reads (src.report.judge.speed.pair_estimate).

One row per pair (b vs a): the step-time change predicted from the norms' own cost with its 95%
interval, coloured by the pair's speed verdict, inside the ±margin band that "equivalent" means;
the whole-step measurement of the same rounds as a hollow mark, the check the prediction is held
against. The jobs' own tokens/s, timed one after another, are not drawn: they rank the machine's
load between jobs, not the norms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.figure import Figure

from src.report.figures.style import new_figure
from src.report.judge.speed import SpeedVerdict
from src.stats.pairs import pair_label
from src.stats.verdicts import SpeedWord

COLORS = {SpeedWord.EQUIVALENT: "tab:green", SpeedWord.FASTER: "tab:blue", SpeedWord.SLOWER: "tab:red", SpeedWord.UNRESOLVED: "0.5"}


@dataclass(frozen=True)
class Row:
    """One pair as drawn, in percent of a's step time."""

    label: str
    word: SpeedWord
    estimate: float
    low: float
    high: float
    measured: float  # the whole steps' estimate (NaN without step rounds)


def rows(verdicts: Sequence[SpeedVerdict]) -> list[Row]:
    """The plot's data: each verdict's own interval, as a percent change of step time."""
    pct = [(v, [100 * math.expm1(x) for x in (v.predicted.diff, v.predicted.low, v.predicted.high)]) for v in verdicts]
    return [Row(pair_label(v.a, v.b), v.verdict, est, low, high, 100 * math.expm1(v.measured.diff) if v.measured else math.nan)
            for v, (est, low, high) in pct]  # fmt: skip


def plot_speed(verdicts: Sequence[SpeedVerdict], margin: float) -> Figure | None:
    """The forest plot of the speed verdicts (None without any)."""
    drawn = rows(verdicts)
    if not drawn:
        return None
    fig, (ax,) = new_figure(8, 1.4 + 0.45 * len(drawn))
    band = 100 * margin
    ax.axvspan(-band, band, color="tab:green", alpha=0.1, lw=0, label=f"±{margin:.0%}: equivalent")
    ax.axvline(0, color="0.4", lw=0.8, ls="--")
    for y, r in enumerate(reversed(drawn)):
        color = COLORS[r.word]
        ax.plot([r.low, r.high], [y, y], color=color, lw=2.5, solid_capstyle="butt")
        ax.plot(r.estimate, y, "o", color=color, ms=6)
        if math.isfinite(r.measured) and abs(r.measured) <= 4 * band:  # a wild whole-step round would hide the rest
            ax.plot(r.measured, y, "o", mfc="none", color="0.35", ms=6)
    ax.set_yticks(range(len(drawn)), [f"{r.label}\n{r.word}" for r in reversed(drawn)], fontsize="small")
    ax.set_ylim(-0.7, len(drawn) - 0.3)
    ax.set(xlabel="step time of b vs a (%), predicted from the norms' own cost, 95% interval")
    ax.grid(axis="x", alpha=0.3)
    # Below the axes: inside, it would cover the last pairs' marks wherever they fall.
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize="small")
    fig.suptitle("Speed per pair (the verdict's estimate; hollow: whole steps measured, the check; off the axis when wild)",
                 fontsize="medium")  # fmt: skip
    return fig
