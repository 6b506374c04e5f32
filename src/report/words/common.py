"""Phrases more than one section of the report says about runs: each written here once, so that the
same fact reads the same wherever it is printed (one run each, how many runs a variant has and how
they ended). Numbers with their uncertainty are src.report.numbers'. Torch-free.
"""

from __future__ import annotations

import pandas as pd

from src.report.numbers import NATS
from src.tracking.tags import FINISHED

ONE_RUN = "one run each"  # the phrase, with what it means where it is said
ONE_RUN_EACH = f"{ONE_RUN}: no interval"
NO_SHARED_SEED = "no seed with both variants finished"  # a paired figure over no seed: none to print


DECIMALS = NATS.decimals  # a test-loss figure's printed precision


def printed_zero(x: float) -> bool:
    """True when `x` prints as zero (`+0.0000`, `-0.0000`): a gap the reader cannot tell from none."""
    return NATS(x) == NATS(0.0)


def counted(n: int, noun: str) -> str:
    """`1 comparison`, `3 comparisons`: a count with its noun agreeing."""
    return f"{n} {noun}{'s' * (n != 1)}"


def how_paired(paired: bool, n: int, n_a: int = 0, n_b: int = 0) -> str:
    """How a difference over seeds was measured, the one phrasing of it: `paired over 3 seeds`, or
    `unpaired (Welch: seed sets differ), n = 2 vs 3` (b's runs, then a's)."""
    return f"paired over {n} seeds" if paired else f"unpaired (Welch: seed sets differ), n = {n_b} vs {n_a}"


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
