"""`claims.png`: a forest plot of the study's claims against this sweep, one row per claim part with an
interval, in a panel per metric and its units (PANELS; what each row draws: docs/reproducing.md, "The forest plot"; why a
part outside its claim's domain has no dot of this sweep's: "The forest plot of the same section").
Its own reading at its own setting is set apart, a grey hollow square below the claim's marks.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.figure import Figure

from src.report.figures.forest import Row, draw_rows, legend
from src.report.figures.style import blank_figure
from src.report.judge.study import Finding, StudySection
from src.report.judge.study_effects import Per
from src.report.read.claims import LOSS, SAVING, SHARE, SPEED, STABILITY
from src.stats.verdicts import ClaimWord

COLORS = {ClaimWord.REPRODUCED: "tab:green", ClaimWord.PARTLY: "tab:olive", ClaimWord.NOT_REPRODUCED: "tab:red",
          ClaimWord.INCONCLUSIVE: "tab:blue", ClaimWord.NOT_APPLICABLE: "0.55"}
# A panel per metric and, for a saving, per kind's units: its growth over sizes (hundreds of percent) would
# squash b's step against a's at a size (a few) to a point. Keyed (metric, over sizes), as `panel_of` reads a part.
PANELS = (((SPEED, False), "training time, b vs a (%)", 100.0), ((LOSS, False), "test loss, b − a (nats)", 1.0),
          ((SHARE, True), "a norm's share of a step,\nlargest model vs smallest (%)", 100.0),
          ((SAVING, True), "b's saving against a (a's norm time less b's),\nlargest model vs smallest (%)", 100.0),
          ((SAVING, False), "b's step vs a's at the largest of its sizes,\nfrom b's saving (%)", 100.0))  # fmt: skip
# The speed panel's title when this sweep's figures are the speed check's (Effect.per: kernel rounds).
CHECK_SPEED_TITLE = ("time, b vs a (%): {whose} training time;\nthis sweep's step time predicted from its norms' kernels\n"
                     "(speed check)")  # three lines: a panel's width beside its row labels; {whose}: who stated the figures
NOT_TESTABLE = "not testable here"
STUDY = {"marker": "D", "color": "black", "ms": 5, "mfc": "white", "label": "the study"}  # the source's figure (label: its noun)
LABELS = {"estimate": "this sweep (simultaneous interval)", "span": "the claim's size (its words and figure)",
          "note": f"{NOT_TESTABLE} (outside the claim's domain)",
          "own": "this sweep's own reading at its setting (no test of the claim)"}  # the legend's words for a row's parts


def not_testable(f: Finding) -> bool:
    """A part outside its claim's domain: drawn without this sweep's figure."""
    return f.word == ClaimWord.NOT_APPLICABLE and bool(f.outside)


def has_interval(f: Finding) -> bool:
    """A part this sweep measured with an interval (one end may be unbounded); the jobs' times on a CPU
    are not a measurement, so never drawn as one."""
    measured = f.effect is None or f.effect.measured
    return measured and math.isfinite(f.estimate) and not (math.isnan(f.low) or math.isnan(f.high))


def panel_of(f: Finding) -> tuple[str, bool]:
    """The key of the panel a part is drawn in (PANELS)."""
    return f.metric, f.part.kind.over_sizes


def drawn(section: StudySection) -> list[Finding]:
    """The rows: the parts with an interval, and every part that is not testable here (interval or not)."""
    keys = [key for key, *_ in PANELS]
    return [f for c in section.claims for f in c.findings if panel_of(f) in keys and (not_testable(f) or has_interval(f))]


def not_drawn(section: StudySection, found: list[Finding]) -> dict[str, list[int]]:
    """Why the plot has no row of a claim -> those claims (numbers, in order): no part drawn, for want
    of an interval, or none swept."""
    why: dict[int, str] = dict.fromkeys(section.unjudged, "not swept")
    for c in section.claims:
        if any(has_interval(f) or f in found for f in c.findings):
            continue
        if c.claim.metric == STABILITY:
            why[c.claim.number] = "an event: runs counted, no interval"
        elif any(f.effect is not None and not f.effect.measured for f in c.findings):
            why[c.claim.number] = "the jobs' times: not a measurement"
        elif any(f.effect is not None and not f.effect.has_interval for f in c.findings):
            why[c.claim.number] = "one run each: no interval"
        else:
            why[c.claim.number] = f"no finished runs of its variants at {section.file.source_noun}'s setting"
    return {w: [n for n in sorted(why) if why[n] == w] for w in dict.fromkeys(why[n] for n in sorted(why))}


def _title(metric: str, title: str, parts: list[Finding], noun: str) -> str:
    sweep = [f for f in parts if not not_testable(f) or f.effect is not None]
    if metric == SPEED and sweep and all(f.effect is not None and f.effect.per == Per.KERNEL_ROUNDS for f in sweep):
        return CHECK_SPEED_TITLE.format(whose="the claimed" if noun == "the claim" else f"{noun}'s")
    return title


def row_label(section: StudySection, f: Finding) -> str:
    """A part's row: its claim's number, its label, the pair (a contrast's two, as the file names them), its word."""
    claim = next(c.claim for c in section.claims if f in c.findings)
    name = f" {f.part.label}" if f.part.label else ""
    pair = f"{f.part.b} vs {f.part.a}" if f.part.a else f"{f.part.b}, {f.part.sizes[-1]} vs {f.part.sizes[0]}"
    if f.part.minus:  # a contrast of two pairs' effects
        pair = " − ".join(f"{named} gap" for named in f.part.contrast_names)
    return f"{claim.number}{name}: {pair}\n{f.word}"


def _view(metric: str, parts: list[Finding]) -> tuple[float, float]:
    """The x range that shows every part's study figure, band, margin and estimate, with room: a
    two-seed interval thousands of percent wide would otherwise squash them all to a point."""
    xs = [0.0]
    for f in parts:
        xs += [x for x in (f.part.published(metric), *f.part.band(metric)) if math.isfinite(x)]  # a trend's band is unbounded
        if not_testable(f) and not has_interval(f):  # no figure of this sweep's drawn
            continue
        xs += [f.estimate, *([-f.margin, f.margin] if f.part.kind.draws_margin else [])]
        # An interval's ends count where they stay near the rest (a tight interval, on this scale).
        figure = f.part.published(metric)
        near = max(abs(figure) if math.isfinite(figure) else 0.0, abs(f.estimate), f.margin if f.margin == f.margin else 0)
        xs += [x for x in (f.low, f.high) if abs(x) < 4 * near]
    low, high = min(xs), max(xs)
    pad = 0.08 * (high - low or 1.0)
    return low - pad, high + pad


def _row(section: StudySection, metric: str, scale: float, f: Finding) -> Row:
    """A claim part in the panel's units: this sweep's estimate, the study's figure, the claim's band and,
    for an equivalence, its margin; a part not testable here is a grey row naming why, with no estimate."""
    low, high = f.part.band(metric)
    why = f"{NOT_TESTABLE}: " + ", ".join(x.fact for x in f.outside) if not_testable(f) else ""
    figure = f.part.published(metric)  # none where the claims file has no table (a trend, a stated hypothesis)
    span = (max(low, -1e3) * scale, min(high, 1e3) * scale) if not (math.isnan(low) or math.isnan(high)) else None
    own = tuple(x * scale for x in (f.estimate, f.low, f.high)) if why and has_interval(f) else None
    return Row(row_label(section, f), COLORS[f.word], *(x * scale for x in (f.estimate, f.low, f.high)),
               marks=((figure * scale, {**STUDY, "label": section.file.source_noun}),) if math.isfinite(figure) else (), span=span,
               margin=f.margin * scale if f.part.kind.draws_margin else None, note=why, own=own)  # fmt: skip


def plot_claims(section: StudySection) -> Figure | None:
    """The forest plot, or None when no claim part has an interval (a one-seed sweep, none of the study's
    variants); the claims it leaves out are named below it, with why."""
    found = drawn(section)
    panels = [(key[0], title, scale, [f for f in found if panel_of(f) == key]) for key, title, scale in PANELS]
    panels = [p for p in panels if p[3]]
    if not panels:
        return None
    # The panels one above the other, 7 inches wide: side by side (14 inches) the figure was too wide for the
    # sweep run's description in a 1440 px window, and scaled down there its labels could not be read.
    heights = [0.6 + 0.9 * len(p[3]) for p in panels]
    fig = blank_figure(7, 1.6 + sum(heights))
    axes = list(np.atleast_1d(fig.subplots(len(panels), 1, height_ratios=heights)))
    for ax, (metric, title, scale, parts) in zip(axes, panels, strict=True):
        # An interval wider than the view (two seeds, a ratio without bound) runs to its edge, arrowed.
        draw_rows(ax, [_row(section, metric, scale, f) for f in parts], [x * scale for x in _view(metric, parts)], LABELS)
        ax.set_title(_title(metric, title, parts, section.file.source_noun), fontsize="medium")
        ax.locator_params(axis="x", nbins=6)  # readable ticks on a narrow panel
    legend(fig)
    whose = "The study's claims" if section.file.is_study else f"The claims of {section.file.called}"
    title = textwrap.fill(f"{whose} against this sweep", 80)  # a long title wraps, never clipped at the figure's edge
    if any(f.part.kind.draws_margin and not not_testable(f) for f in found):  # a margin is drawn: say what it is
        title += " (dotted: the report's equivalence margin)"
    if any(not_testable(f) for f in found):
        own = any(has_interval(f) for f in found if not_testable(f))
        said = f"{NOT_TESTABLE}: a claim outside this sweep's setting; " + (
            "this sweep's own reading is the grey square, set apart" if own else "this sweep's own reading is in the report")
        title += "\n" + textwrap.fill(said, 80)  # a panel's width holds 80 characters
    if groups := not_drawn(section, found):  # a claim with no row: the figure says so, rather than dropping it silently
        said = "; ".join(f"{'claim' if len(ns) == 1 else 'claims'} {', '.join(map(str, ns))} ({why})" for why, ns in groups.items())
        title += "\n" + textwrap.fill(f"Not drawn: {said}; their lines in the report give this sweep's figure.", 80)
    fig.suptitle(title, fontsize="medium")
    return fig
