"""A pair (a, b) measures b against a: the difference, its sign and its name are written here once.

Every comparison of the project (the report's paired tests, the sequential sweeper's looks, the
planner, the speed check) reads a pair this way, so "b vs a" and a positive difference always mean
that b has more of the metric than a.
"""

from __future__ import annotations

from typing import Any


def paired_difference(a: Any, b: Any, relative: bool) -> Any:
    """b measured against a, seed by seed: b - a, or b / a - 1 for a relative metric (tokens/s).
    Scalars or arrays."""
    return b / a - 1 if relative else b - a


def pair_label(a: str, b: str) -> str:
    """The name of the pair (a, b) wherever it is printed or stored: 'b vs a'."""
    return f"{b} vs {a}"
