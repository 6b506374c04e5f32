"""A difference: b differs from a on the metric, on the side its source's figure (or size) gives, by
about that much. Read two-sided from the interval (direction, size against the band, equivalence to
zero within the report's margin): the rule every other kind departs from (src.report.kinds.base)."""

from __future__ import annotations

from src.report.kinds.base import ClaimKind


class Difference(ClaimKind):
    name = "difference"
    sided = True
