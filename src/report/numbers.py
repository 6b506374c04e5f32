"""How the report prints a number with its uncertainty: the one writer of an estimate with its
interval, of "no spread", of a p-value, of what would settle an undecided reading and of an
equivalence. Every section's words call these; none formats an interval itself.

What every interval printed holds to (tests/test_report_properties.py checks it on generated sweeps):
its level is said beside it; its estimate, printed at the same precision, lies inside it (rounding is
monotone); a real spread never prints as `[x, x]` and a shown difference never as `+0.0000` (the
decimals widen until the ends, or the estimate and zero, read apart); no spread at all is said in
words, never as a zero-wide interval. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from src.stats.settings import MAX_SEEDS


@dataclass(frozen=True)
class Units:
    """How a value is shown: `text(x, decimals)`, at `decimals` unless more are needed (at most `most`)
    to tell an interval's ends apart or a nonzero estimate from zero."""

    text: Callable[[float, int], str]
    decimals: int
    most: int

    def __call__(self, x: float, decimals: int | None = None) -> str:
        return self.text(x, self.decimals if decimals is None else decimals)


def _zero(x: float) -> float:
    return x + 0.0  # -0.0 prints as +0: a gap of exactly zero taken from the other side


NATS = Units(lambda x, d: f"{_zero(x):+.{d}f}", 4, 8)  # a test loss or a gap in nats
RELATIVE = Units(lambda x, d: "+∞" if x == math.inf else f"{_zero(x):+.{d}%}", 1, 4)  # a fraction: +0.013 is +1.3%
LOG_RATIO = Units(lambda x, d: f"{_zero(math.expm1(x)):+.{d}%}", 1, 4)  # a log ratio, as the relative change it is
FACTOR = Units(lambda x, d: f"{math.exp(x):.{d}f}×", 2, 5)  # a log ratio, as a factor
# Nats at their own 4 decimals, never widened: a gap no pair tells from zero may print +0.0000 (a tie as printed).
NATS_AS_IS = Units(NATS.text, NATS.decimals, NATS.decimals)
POINTS = Units(lambda x, d: f"{_zero(x * 100):+.{d}f} pp", 1, 4)  # a difference of two relative changes
SHARE = Units(lambda x, d: f"{x:.{d}%}", 2, 5)  # a part of a whole, unsigned: 0.0123 is 1.23%


def decimals_for(units: Units, diff: float, low: float = math.nan, high: float = math.nan) -> int:
    """The fewest decimals (from the units' own, at most `most`) at which a nonzero `diff` does not
    print as zero and two different ends do not print alike."""

    def unclear(d: int) -> bool:
        zero = diff != 0 and math.isfinite(diff) and units(diff, d) == units(0.0, d)
        same = low != high and math.isfinite(low) and math.isfinite(high) and units(low, d) == units(high, d)
        return zero or same

    return next((d for d in range(units.decimals, units.most) if not unclear(d)), units.most)


def level_text(level: float) -> str:
    """`95% interval`, `90% interval`, `99.3% interval`: an interval's level, said beside every interval."""
    return f"{round(100 * level, 1):g}% interval"


def no_interval_text(per: str = "seed") -> str:
    """No spread: every observation moved by the same amount, so there is no interval to print."""
    return f"every {per} alike: no interval"


def moved_alike(n: int, per: str, moved: str, exactly: bool = True) -> str:
    """No spread, said in full: `every one of 3 seeds moved by exactly +0.0020: no spread, so no
    interval` (`exactly` False: alike to floating-point rounding, src.stats.inference.alike)."""
    how = f"exactly {moved}" if exactly else f"{moved} (to floating-point rounding)"
    return f"every one of {n} {per} moved by {how}: no spread, so no interval"


def estimate_text(diff: float, low: float, high: float, level: float, units: Units = NATS, spread: bool = True,
                  per: str = "seed") -> str:  # fmt: skip
    """`+0.0013 [+0.0010, +0.0017] (90% interval)`: an estimate, its interval and the interval's level.
    With no spread (`spread` False) or no interval (NaN ends), said in words."""
    if not spread:
        return f"{shown(diff, units)} ({no_interval_text(per)})"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{shown(diff, units)} (no interval)"
    d = decimals_for(units, diff, low, high)
    if units(low, d) == units(high, d):  # a spread below even the widest decimals: no width to print
        return f"{units(diff, d)} (its {level_text(level)} narrower than the last digit)"
    return f"{units(diff, d)} [{units(low, d)}, {units(high, d)}] ({level_text(level)})"


def interval_only(low: float, high: float, level: float, units: Units = NATS) -> str:
    """`90% interval [-0.3%, +0.4%]`: an interval printed without its estimate, its level first."""
    d = decimals_for(units, math.nan, low, high)
    return f"{level_text(level)} [{units(low, d)}, {units(high, d)}]"


def shown(x: float, units: Units = NATS) -> str:
    """A figure alone (no interval): at the units' decimals, more where it would print as zero (and
    where even the most would, at the units' own: "+0.00000000" says no more than "+0.0000")."""
    d = decimals_for(units, x)
    return units(x, d) if units(x, d) != units(0.0, d) else units(x)


# --- tests and what would settle them ------------------------------------------------------------------

# The smallest p printed as a number. Below it scipy's t tail leaves float64's normal range (it
# underflows to 0 for a large t over many seeds), and no reading changes: `p < 1e-300` says both.
P_FLOOR = 1e-300


def p_text(p: float, name: str = "p") -> str:
    """`p = 0.034`, `p = 3.1e-07`, or below `P_FLOOR` `p < 1e-300`: never `p = 0`."""
    return f"{name} < {P_FLOOR:.0e}" if p < P_FLOOR else f"{name} = {p:.2g}"


def settle_text(count: int | None, per: str) -> str:
    """`about 22 seeds would settle it`, `more than 10,000 ...`, or `more seeds would settle it`."""
    if count is None:
        return f"more {per} would settle it"
    return f"more than {count - 1:,} {per} would settle it" if count > MAX_SEEDS else f"about {count} {per} would settle it"


def equivalent_text(margin: str, remains: str | bool = False) -> str:
    """`equivalent within ±2%`, and where a difference is shown too, the difference that remains
    (`True`: where its numbers follow anyway)."""
    if remains is True:
        return f"equivalent within ±{margin}, a difference remains"
    return f"equivalent within ±{margin}" + (f" (a difference of {remains} remains)" if remains else "")


def aside(label: str, said: str) -> str:
    """`label (said)`; inside the label's own closing parenthesis when it ends in one, so that two asides
    never stand back to back: `training time (s; jobs one after another)`."""
    return f"{label[:-1]}; {said})" if label.endswith(")") else f"{label} ({said})"
