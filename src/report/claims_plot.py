"""`claims.png`: a forest plot of the study's claims against this sweep.

One row per claim part with an interval, speed parts (training time, %) and loss parts (nats) in
two panels: this sweep's estimate with its interval (simultaneous over the section's family), the
study's figure, the band the claim's words give, the report's equivalence margin (for an
equivalence) and zero. A part outside its claim's domain is drawn grey: its figure is this sweep's
own, not a test of the claim.
"""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from src.report.against_study import Finding, StudySection
from src.report.plots import new_figure
from src.report.published import EQUIVALENCE, SPEED
from src.stats.verdicts import ClaimWord

COLORS = {ClaimWord.REPRODUCED: "tab:green", ClaimWord.PARTLY: "tab:olive", ClaimWord.NOT_REPRODUCED: "tab:red",
          ClaimWord.INCONCLUSIVE: "tab:blue", ClaimWord.NOT_APPLICABLE: "0.55"}
PANELS = ((SPEED, "training time, b vs a (%)", 100.0), ("test_loss", "test loss, b − a (nats)", 1.0))


def _label(section: StudySection, f: Finding) -> str:
    claim = next(c.claim for c in section.claims if f in c.findings)
    name = f" {f.part.label}" if f.part.label else ""
    pair = f"{f.part.b} vs {f.part.a}"
    if f.part.minus:  # a contrast of two pairs' effects
        pair = "built-ins' gap − hand-rolled gap"
    return f"{claim.number}{name}: {pair}\n{f.word}"


def _view(metric: str, parts: list[Finding]) -> tuple[float, float]:
    """The x range that shows every part's study figure, band, margin and estimate, with room: a
    two-seed interval thousands of percent wide would otherwise squash them all to a point."""
    xs = [0.0]
    for f in parts:
        xs += [f.part.published(metric), *f.part.band(metric), f.estimate]
        xs += [-f.margin, f.margin] if f.part.asserts == EQUIVALENCE else []
        # An interval's ends count where they stay near the rest (a tight interval, on this scale).
        xs += [x for x in (f.low, f.high) if abs(x) < 4 * max(abs(f.part.published(metric)), abs(f.estimate), f.margin if f.margin == f.margin else 0)]
    low, high = min(xs), max(xs)
    pad = 0.08 * (high - low or 1.0)
    return low - pad, high + pad


def plot_claims(section: StudySection) -> Figure | None:
    """The forest plot, or None when no claim part has an interval (a one-seed sweep, none of the study's
    variants); the claims it leaves out are named below it, with why."""
    found = section.plotted()
    panels = [(metric, title, scale, [f for f in found if (f.metric == SPEED) == (metric == SPEED)]) for metric, title, scale in PANELS]
    panels = [p for p in panels if p[3]]
    if not panels:
        return None
    rows = max(len(p[3]) for p in panels)
    fig, axes = new_figure(7 * len(panels), 1.2 + 0.75 * rows, ncols=len(panels))
    for ax, (metric, title, scale, parts) in zip(axes, panels, strict=True):
        left, right = _view(metric, parts)
        for y, f in enumerate(reversed(parts)):
            color = COLORS[f.word]
            low, high = f.part.band(metric)
            ax.fill_betweenx([y - 0.3, y + 0.3], low * scale, high * scale, color="tab:orange", alpha=0.25, lw=0,
                             label="the claim's size (its words and figure)" if y == 0 else None)  # fmt: skip
            if f.part.asserts == EQUIVALENCE:
                for x in (-f.margin, f.margin):
                    ax.plot([x * scale] * 2, [y - 0.35, y + 0.35], color="0.3", ls=":", lw=1)
            # An interval wider than the view (two seeds, a ratio without bound) runs to its edge, arrowed.
            low, high = max(f.low, left), min(f.high, right)
            ax.plot([low * scale, high * scale], [y, y], color=color, lw=2.5, solid_capstyle="butt")
            for end, edge, marker in ((f.low, left, "<"), (f.high, right, ">")):
                if (end < edge) if marker == "<" else (end > edge):
                    ax.plot(edge * scale, y, marker, color=color, ms=7)
            ax.plot(f.estimate * scale, y, "o", color=color, ms=6, label="this sweep (simultaneous interval)" if y == 0 else None)
            ax.plot(f.part.published(metric) * scale, y, "D", color="black", ms=5, mfc="white", label="the study" if y == 0 else None)
        ax.set_xlim(left * scale, right * scale)
        ax.axvline(0, color="0.4", lw=0.8, ls="--")
        ax.set_yticks(range(len(parts)), [_label(section, f) for f in reversed(parts)], fontsize="small")
        ax.set_ylim(-0.7, len(parts) - 0.3)
        ax.set(title=title)
        ax.grid(axis="x", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize="small")
    title = "The study's claims against this sweep (dotted: the report's equivalence margin)"
    if left := section.not_plotted():
        # A claim with no interval has no row: the figure says so, rather than dropping it silently.
        groups: dict[str, list[int]] = {}
        for number, why in left.items():
            groups.setdefault(why, []).append(number)
        said = "; ".join(f"{'claim' if len(ns) == 1 else 'claims'} {', '.join(map(str, ns))} ({why})" for why, ns in groups.items())
        title += "\n" + textwrap.fill(f"Not drawn: {said}; their lines in the report give this sweep's figure.", 80 * len(panels))
    fig.suptitle(title, fontsize="medium")
    return fig
