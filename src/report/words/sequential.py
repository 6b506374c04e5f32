"""The sequential sweep's verdicts in words (src.report.judge.sequential holds them): per comparison,
the look that settled it, the seeds per variant it took, the level spent, and for an open one the
least difference the budget detects."""

from __future__ import annotations

import math

from src.report.judge.sequential import OPEN, SequentialVerdict
from src.report.words.common import counted

HEADING = "Seeds per verdict (the sequential sweep's own decisions, error-controlled over its looks)"


def sentence(v: SequentialVerdict) -> str:
    where = f"at look {v.look}" if v.look is not None else "not settled when the sweep stopped"
    size = f"{v.detectable:.0%}" if v.metric == "tokens_per_sec" else f"{v.detectable:.2g}"  # speed: relative
    least = f"; the budget detects |Δ| ≥ {size}" if math.isfinite(v.detectable) and v.verdict in OPEN else ""
    return f"{v.pair} ({v.metric}): {v.verdict.label} {where}, {counted(v.seeds, 'seed')} per variant, level spent {v.spent:.2g}{least}"
