"""What a claim's part asserts of its effect: one module per kind, one registry.

Each kind (src.report.kinds.base.ClaimKind) owns its checks, its band and side, how its interval is read
into a word, the words of its claim and reasons, and its figure marks; the format, the judge, the
words and the figure reach a part's kind through `Part.kind`, never by its name. A new kind: a module
here, its entry below, docs/claims.md's row, and tests.
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
