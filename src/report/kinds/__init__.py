"""What a claim's part asserts of its effect: one module per kind (src.report.kinds.base.ClaimKind),
one registry; docs/claims.md, "Each kind is one module", says what a kind owns and how to add one.
"""

from __future__ import annotations

from src.report.kinds.base import ClaimKind
from src.report.kinds.difference import Difference
from src.report.kinds.equivalence import Equivalence
from src.report.kinds.event import Event
from src.report.kinds.no_worse import NoWorse
from src.report.kinds.trend import Trend

# A claims file's `asserts:` values, in docs/claims.md's order.
KINDS: dict[str, ClaimKind] = {k.name: k for k in (Difference(), Equivalence(), Event(), Trend(), NoWorse())}
