"""An event: b alone does something the others do not (its loss goes NaN). Its effect is a count of
runs, not an interval: src.report.judge.study counts the runs that trained through or diverged, and
src.stats.verdicts' `judge_event` reads them by Fisher's exact test. It has no size and no `a`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from src.report.kinds.base import At, ClaimKind

if TYPE_CHECKING:
    from src.report.read.claims import Part


class Event(ClaimKind):
    name = "event"
    paired = False
    sequential = False
    banded = False

    def check_a(self, part: Part, metric: str) -> None:
        if part.a is not None:
            raise At("a", "an event is of b alone (whether its loss went NaN); remove a")

    def check_size(self, metric: str, low: float, high: float) -> None:
        raise At("size", "an event has no size; remove size")

    def band(self, part: Part, metric: str) -> tuple[float, float]:
        return math.nan, math.nan  # a count of runs, held against no band
