"""What a claim measures, and the units its figures are shown in.

A metric decides how a part's effect is measured (src.report.judge.study_effects) and how its figures
print; what a part asserts of that effect is its kind (src.report.kinds). Light: a sweep reads its
claims files before its first job.
"""

from __future__ import annotations

from enum import StrEnum

from src.report.numbers import NATS, POINTS, RELATIVE, Units
from src.report.numbers import shown as figure


class Metric(StrEnum):
    """What a claim measures (each member named as its file spells it)."""

    train_time_s = "train_time_s"  # training time: b / a - 1 (the speed check's kernel rounds where it timed them)
    test_loss = "test_loss"  # test loss: b - a, nats
    divergence = "divergence"  # whether b's loss went NaN (an event)
    norm_share = "norm_share"  # a norm's share of a training step, per model size (a trend)
    # b's saving against a (a's norm time less b's), per model size: a trend (it grows with the size) or
    # a difference at the sizes listed (b's step against a's at the largest, within a band)
    norm_saving = "norm_saving"


SPEED, LOSS, STABILITY, SHARE, SAVING = (m.value for m in Metric)
RELATIVE_METRICS = (SPEED, SHARE, SAVING)  # sizes that are fractions of a value: 0.03 is 3%
SIZED = (SHARE, SAVING)  # timed per model size by the speed check's share rounds, not read from runs


def units_of(metric: str, contrast: bool = False) -> Units:
    """A metric's units: a relative change (percentage points of two, for a contrast), or nats."""
    return (POINTS if contrast else RELATIVE) if metric in RELATIVE_METRICS else NATS


def shown(metric: str, x: float, contrast: bool = False) -> str:
    """A value in its metric's units (src.report.numbers prints it)."""
    return figure(x, units_of(metric, contrast))
