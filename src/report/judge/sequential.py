"""The sequential sweeper's verdicts in the report: per comparison, the look that settled it, the
seeds per variant it took and the level it had spent by then (from the looks on the sweep's parent
run, `src.tracking.looks`).

The report's own comparisons are fixed-n tests over every seed run; these are the decisions the
sweep stopped on, with error control over its looks (src/stats/sequential.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from src.stats.pairs import pair_label
from src.stats.verdicts import SequentialWord
from src.tracking.looks import latest_looks
from src.tracking.store import Store

OPEN = (SequentialWord.UNDECIDABLE, SequentialWord.UNDECIDED)  # what the budget detects is said for these


@dataclass(frozen=True)
class SequentialVerdict:
    pair: str  # "b vs a", as the report names a pair
    metric: str
    verdict: SequentialWord
    look: int | None  # the look that settled it (None: the sweep stopped before it was settled)
    seeds: int  # seeds per variant when it was settled, else at the sweep's last look
    spent: float  # the level spent on it by then
    detectable: float  # for undecidable/undecided: the least |Δ| the budget detects (80% power)

    def __post_init__(self) -> None:  # a decision read from the looks' JSON arrives as its text
        object.__setattr__(self, "verdict", SequentialWord(self.verdict))


def load_verdicts(store: Store, experiment_id: str) -> list[SequentialVerdict]:
    """Each comparison's standing at the last look of the experiment's latest sequential sweep ([] when
    it had none)."""
    found = latest_looks(store, experiment_id)
    if not found or not found[1]:
        return []
    last = found[1][-1]
    out = []
    for row in last.get("comparisons", []):
        look, spent = row.get("decided_at_look"), row.get("spent")
        out.append(SequentialVerdict(
            pair_label(str(row["a"]), str(row["b"])), str(row["metric"]),  # as data, never parsed from its name
            SequentialWord(str(row["decision"])), int(look) if look is not None else None,
            int(row.get("decided_at_seeds") or last.get("seeds")), float(spent) if spent is not None else math.nan,
            abs(float(row.get("detectable", math.nan) or math.nan)),
        ))  # fmt: skip
    return out


def with_verdicts(comparisons: pd.DataFrame, verdicts: Sequence[SequentialVerdict]) -> pd.DataFrame:
    """comparisons.csv with the sequential columns (empty where the sweep did not compare that pair)."""
    if not verdicts:
        return comparisons
    extra = pd.DataFrame(
        [{"pair": v.pair, "metric": v.metric, "sequential_verdict": v.verdict.label,
          "decided_at_look": v.look, "seeds_used": v.seeds, "level_spent": v.spent}
         for v in verdicts]  # fmt: skip
    )
    merged = comparisons.merge(extra, on=["pair", "metric"], how="left")
    return merged.astype({"decided_at_look": "Int64", "seeds_used": "Int64"})  # whole, blank if not compared
