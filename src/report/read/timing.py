"""How the sweep's jobs ran in time, read from the runs' own start and end times (`start_time`, and
`end_time` or `train_time_s`: src.report.read.runs), never assumed from the launcher: one rule, which the study's
judgement (src.report.judge.study_effects.jobs_timing) and the jobs' words (src.report.words.jobs) read."""

from __future__ import annotations

import pandas as pd


def most_at_once(runs: pd.DataFrame, among: pd.DataFrame | None = None) -> int:
    """The most runs whose [start, end) overlapped at one moment (1: one after another); 0 when no
    run has both times. A run without an end (running, lost) is left out: it has no timing to show.
    With `among` (all the runs read, `runs` among them): the most of those running at a moment when
    one of `runs` ran: a variant's jobs that each ran beside another variant's ran at once."""
    own = _spans(runs)
    if not len(own):
        return 0
    mine = set(own.index)
    spans = own if among is None else _spans(among)
    # An end sorts before a start at the same instant: a job that starts as another ends did not overlap it.
    events = sorted([(t, 1, i in mine) for i, t in spans.start_time.items()] + [(t, -1, i in mine) for i, t in spans.end_time.items()])
    running = running_mine = most = 0
    for _, step, is_mine in events:
        running += step
        running_mine += step if is_mine else 0
        if running_mine > 0:
            most = max(most, running)
    return most


def _spans(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's [start, end), by the frame's index; runs without both left out."""
    if "start_time" not in runs or not {"end_time", "train_time_s"} & set(runs.columns):
        return pd.DataFrame({"start_time": [], "end_time": []})
    # Without the runs' end times (a frame made in Python), a job ends when its training time is up.
    ends = runs.end_time if "end_time" in runs else runs.start_time + pd.to_timedelta(runs.train_time_s, unit="s")
    return pd.DataFrame({"start_time": runs.start_time, "end_time": ends}).dropna()
