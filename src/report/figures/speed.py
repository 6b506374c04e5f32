"""`speed.png`: each pair's speed estimate, the one its verdict reads (src.report.judge.speed.pair_estimate).

One row per pair (b vs a): the step-time change predicted from the norms' own cost with its 95%
interval (capped at both ends, and in figures in its label, so that a tight one is seen), coloured by the pair's speed verdict, inside the ±margin band that "equivalent" means;
the whole-step measurement as a hollow mark where it checks the prediction (precise enough to:
src.report.judge.speed.agreement; a measurement too imprecise to check anything is not drawn as one). The jobs' own tokens/s, timed one after another, are not drawn: they rank the machine's
load between jobs, not the norms.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

from matplotlib.figure import Figure

from src.report.figures.forest import Row, draw_rows, legend
from src.report.figures.style import new_figure
from src.report.judge.speed import Agreement, SpeedVerdict
from src.stats.pairs import pair_label
from src.stats.verdicts import SpeedWord

COLORS = {SpeedWord.EQUIVALENT: "tab:green", SpeedWord.FASTER: "tab:blue", SpeedWord.SLOWER: "tab:red", SpeedWord.UNRESOLVED: "0.5"}
MEASURED = {"marker": "o", "mfc": "none", "color": "0.35", "ms": 6, "zorder": 3}  # hollow, over the estimate it checks


def rows(verdicts: Sequence[SpeedVerdict], margin: float) -> list[Row]:
    """A row per verdict: its own interval, as a percent change of step time; the whole steps' estimate
    beside it where it checks the prediction, unless it is wild (past 4× the margin, where it would
    squash the rest to a point)."""
    found = []
    for v in verdicts:
        checked = v.measured is not None and v.agreement in (Agreement.AGREE, Agreement.DISAGREE)
        p, measured = v.predicted, v.measured.diff if checked else math.nan
        est, low, high, measured = (100 * math.expm1(x) for x in (p.diff, p.low, p.high, measured))
        check = ((measured, MEASURED),) if math.isfinite(measured) and abs(measured) <= 4 * 100 * margin else ()
        # The interval in the label too: at a step-time scale a tight one is a few pixels wide.
        label = f"{pair_label(v.a, v.b)}\n{v.verdict}: {est:+.2f}% [{low:+.2f}, {high:+.2f}]"
        found.append(Row(label, COLORS[v.verdict], est, low, high, marks=check))
    return found


def plot_speed(verdicts: Sequence[SpeedVerdict], margin: float) -> Figure | None:
    """The forest plot of the speed verdicts (None without any)."""
    drawn = rows(verdicts, margin)
    if not drawn:
        return None
    fig, (ax,) = new_figure(8, 1.4 + 0.45 * len(drawn))
    ax.axvspan(-100 * margin, 100 * margin, color="tab:green", alpha=0.1, lw=0, label=f"±{margin:.0%}: equivalent")
    draw_rows(ax, drawn)
    ax.set(xlabel="step time of b vs a (%), predicted from the norms' own cost, 95% interval")
    legend(fig)  # below the axes: inside, it would cover the last pairs' marks wherever they fall
    # The title names the hollow mark only where one is drawn, and wraps to the figure's width.
    hollow = "; hollow: whole steps measured, where precise enough to check it; off the axis when wild" if any(r.marks for r in drawn) else ""
    fig.suptitle(textwrap.fill(f"Speed per pair (the verdict's estimate{hollow})", 90), fontsize="medium")
    return fig
