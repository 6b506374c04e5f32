"""Statistics with no knowledge of runs, MLflow or torch: numbers in, intervals and decisions out.

- `inference`: means with t-intervals, paired t and bootstrap, Welch, TOST, Holm, medians of rounds.
- `pairs`: the one convention for a pair (a, b): b measured against a, named "b vs a".
- `sequential`: the group-sequential design that adds seeds until a comparison is decided.

Used by the report, the benchmarks and the sequential sweeper alike, so it sits below them all.
"""
