"""How the sweep's jobs were timed, in words: the one phrasing of it, for the table's jobs' columns and
table.csv (src.report.read.table), the headline and the study section.

A job's own tokens/s and training time are not a measurement of its norm against another's: jobs run
one after another time the machine's load between them (the same machine gave 566 and 1,485 tok/s
minutes apart), and jobs run at once (a pool, SLURM) time each other's load, or different machines.
Which of the two happened is read from the runs' own start and end times (`start_time`, `end_time`:
src.report.read.runs), never assumed from the launcher.
"""

from __future__ import annotations

import pandas as pd

from src.report.judge.study_effects import Timing
from src.report.read.timing import most_at_once

ONE_AFTER_ANOTHER = "one after another"
# A frame without the runs' times (one made up in Python): what is known is only that each was a job.
SEPARATELY = "separately"
NOT_A_MEASUREMENT = "not a measurement"
AT_ONCE = "at once"  # where the count of jobs overlapping is not said


def how_jobs_ran(runs: pd.DataFrame) -> str:
    """How the runs' jobs were timed, to follow "jobs run" or stand in brackets: "one after another",
    "at once, up to 3 overlapping in time", or "separately" when the frame has no times."""
    return jobs_ran(most_at_once(runs))


def jobs_ran(at_once: int) -> str:
    """`how_jobs_ran` from `most_at_once`'s count (a table keeps the count: src.report.read.table)."""
    if at_once <= 0:
        return SEPARATELY
    return ONE_AFTER_ANOTHER if at_once == 1 else f"{AT_ONCE}, up to {at_once} overlapping in time"


def jobs_caveat(at_once: int) -> str:
    """The caveat a comparison of the jobs' own times carries: "one after another: not a measurement"."""
    return f"{jobs_ran(at_once)}: {NOT_A_MEASUREMENT}"


def timing_caveat(timing: Timing | None, short: bool = False) -> str:
    """Why a claim's time is not a measurement of the norm ("" where it is): said wherever the time is printed."""
    if timing == Timing.ONE_AFTER_ANOTHER:
        ran, load = jobs_ran(1), "the machine's load between jobs"
    elif timing == Timing.AT_ONCE:
        ran, load = AT_ONCE, "each beside the others' load"
    else:
        return ""
    return f"jobs {ran} on CPUs: machine load" if short else f"jobs timed {ran} on CPUs: {load}, {NOT_A_MEASUREMENT}"
