"""Phrases more than one section of the report says: each written here once, so that the same fact
reads the same wherever it is printed (an estimate with its interval and the interval's level, no
spread, one run each, how many runs a variant has and how they ended). Torch-free.
"""

from __future__ import annotations

import pandas as pd

from src.tracking.tags import FINISHED

ONE_RUN_EACH = "one run each: no interval"


DECIMALS = 4  # a test-loss figure's printed precision
MORE_DECIMALS = 8  # the most a shown difference widens to so that it never prints as zero


def nats(x: float, decimals: int = DECIMALS) -> str:
    """A test-loss figure or gap as the report prints it (signed, 4 decimals unless said)."""
    return f"{x + 0.0:+.{decimals}f}"  # + 0.0: a gap of exactly -0.0 (0 taken from the other side) prints +0


def printed_zero(x: float) -> bool:
    """True when `x` prints as zero (`+0.0000`, `-0.0000`): a gap the reader cannot tell from none."""
    return float(nats(x)) == 0


def decimals_for(x: float) -> int:
    """The decimals at which a nonzero `x` does not print as zero (4 where it already does not, at most 8):
    a difference shown at the family's level is never printed as `+0.0000`."""
    decimals = DECIMALS
    while x != 0 and float(nats(x, decimals)) == 0 and decimals < MORE_DECIMALS:
        decimals += 1
    return decimals


def estimate_text(diff: float, low: float, high: float, level: float, decimals: int = DECIMALS) -> str:
    """A test-loss estimate with the interval it was read from, its level always said:
    `+0.0013 (90% CI [+0.0010, +0.0017])`."""
    return f"{nats(diff, decimals)} ({level:.0%} CI [{nats(low, decimals)}, {nats(high, decimals)}])"


def alike_text(per: str = "seed") -> str:
    """No spread: every observation moved by exactly the same amount, so no interval (a zero-wide one
    is never printed as [x, x])."""
    return f"every {per} alike: no interval"


def run_counts(runs: pd.DataFrame) -> str:
    """One variant's runs and how they ended: `3 runs: 1 finished, 2 diverged`, `3 runs, all finished`, `1 run`."""
    n = len(runs)
    if n == 1:
        outcome = str(runs.outcome.iloc[0])
        return "1 run" if outcome == FINISHED else f"1 run, {outcome}"
    counts = runs.outcome.value_counts()
    if len(counts) == 1:
        return f"{n} runs, all {counts.index[0]}"
    ordered = [FINISHED, *sorted(o for o in counts.index if o != FINISHED)]
    return f"{n} runs: " + ", ".join(f"{int(counts[o])} {o}" for o in ordered if o in counts)


def one_run_each(runs: pd.DataFrame) -> bool:
    """True only where every variant has exactly one run (of any outcome): the one case "one run each" is said."""
    return len(runs) > 0 and bool((runs.groupby("variant").size() == 1).all())
