"""A pair (a, b) measures b against a: its name is written here once.

Every comparison of the project (the report's paired tests, the sequential sweeper's looks, the
planner, the speed check) reads a pair this way, so "b vs a" and a positive difference
(src.report.judge.pairs.paired_difference) always mean that b has more of the metric than a.
"""

from __future__ import annotations


def pair_label(a: str, b: str) -> str:
    """The name of the pair (a, b) wherever it is printed or stored: 'b vs a'."""
    return f"{b} vs {a}"
