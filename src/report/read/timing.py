"""How the sweep's jobs ran in time, read from the runs' own start and end times (`start_time`, and
`end_time` or `train_time_s`: src.report.read.runs), never assumed from the launcher: one rule, which the study's
judgement (src.report.judge.study_effects.jobs_timing) and the jobs' words (src.report.words.jobs) read."""

from __future__ import annotations

import pandas as pd


def most_at_once(runs: pd.DataFrame) -> int:
    """The most runs whose [start, end) overlapped at one moment (1: one after another); 0 when no
    run has both times. A run without an end (running, lost) is left out: it has no timing to show."""
    if "start_time" not in runs or not {"end_time", "train_time_s"} & set(runs.columns):
        return 0
    # Without the runs' end times (a frame made in Python), a job ends when its training time is up.
    ends = runs.end_time if "end_time" in runs else runs.start_time + pd.to_timedelta(runs.train_time_s, unit="s")
    timed = pd.DataFrame({"start_time": runs.start_time, "end_time": ends}).dropna()
    # An end sorts before a start at the same instant: a job that starts as another ends did not overlap it.
    events = sorted([(t, 1) for t in timed.start_time] + [(t, -1) for t in timed.end_time], key=lambda e: (e[0], e[1]))
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most
