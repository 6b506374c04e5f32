"""Judging: every word the report prints is decided here, by the one rule in src/stats/verdicts.py, and
kept as data with its reason: pairs of variants (`pairs`), the kernel-level speed check (`speed`),
learning-rate stability (`stability`), a sequential sweep's decisions (`sequential`), the study's
claims (`study`, measured by `study_effects`, each of the study's norms found among the sweep's
variants by `study_match`). No sentence is written here (the study's judgements hold none:
src.report.words.study writes them from these data)."""
