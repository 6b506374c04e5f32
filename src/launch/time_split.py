"""Where a sweep's time went, said at its end: training, the speed check's measuring, and the rest.

The rest is the tool's own cost (start-up, the checks before launch, the data, recording, each job's
test, the report): `python -m src.bench overhead` measures it per job against a bare Hydra +
Lightning sweep. Training is each job's `train_time_s` (its fit, validation included) for the jobs
of this sweep run that this command trained (tagged with its id, src.core.cli.COMMAND_ENV: another
copy of the sweep on the same store trains its own) and that ended while it ran; a job resumed here
counts this command's segment alone (its `train_time_s` less `earlier_train_time_s`), the earlier
attempts' time said apart; a resumed run recorded without that metric (older code) counts whole, and
the line says "at most" then.
"""

from __future__ import annotations

import os
import time

from src.core.cli import COMMAND_ENV, mark_command

COMMAND_STARTED_ENV = "NORMSWEEP_COMMAND_STARTED"  # unix time `python -m src.train` started (src/train.py)


def mark_command_start(new: bool = False) -> None:
    """The first `src.train` of a process tree sets them; a job process it starts keeps the parent's.
    `new`: this process is a command line (`python -m src.train`), a command of its own even when
    the process that started it had one (a notebook, a script, a test that imported src.train)."""
    if new:
        os.environ[COMMAND_STARTED_ENV] = f"{time.time():.3f}"
    os.environ.setdefault(COMMAND_STARTED_ENV, f"{time.time():.3f}")
    mark_command(new)


def split_line(training_s: float, measuring_s: float, wall_s: float, resumed: bool, earlier_s: float = 0.0) -> str:
    """One line: each part's seconds and share of the command's wall time; `resumed`: `training_s`
    includes earlier attempts' time of unknown size; `earlier_s`: earlier attempts' time left out of it."""
    rest = max(0.0, wall_s - training_s - measuring_s)

    def part(seconds: float) -> str:
        return f"{seconds:,.0f} s ({seconds / wall_s:.0%})" if wall_s > 0 else f"{seconds:,.0f} s"

    before = f" (and {earlier_s:,.0f} s in earlier attempts of resumed jobs)" if earlier_s > 0 else ""
    measured = f", the speed check {part(measuring_s)}" if measuring_s else ""
    if training_s + measuring_s > wall_s > 0:  # jobs ran at once (a pool, a node): their training adds up past the wall
        return (
            f"[normsweep] where the time went: {wall_s:,.0f} s in all: the jobs' training {training_s:,.0f} s summed over "
            f"jobs that ran at once{before}{measured}; no share of the wall time is theirs alone"
        )
    trained = f"training{' at most' if resumed else ''} {part(training_s)}{before}"
    return (
        f"[normsweep] where the time went: {wall_s:,.0f} s in all: {trained}{measured}, "
        f"the rest {part(rest)} (start-up, checks, data, recording, tests, the report)"
    )


def sweep_time_line(store: object, experiment_id: str, parent_run_id: str, measuring_s: float) -> str | None:
    """The line for this sweep run's jobs, or None when the command's start is unknown."""
    from src.tracking.store import Store
    from src.tracking.tags import COMMAND_TAG, EARLIER_TRAIN_TIME, PARENT_TAG

    started = os.environ.get(COMMAND_STARTED_ENV)
    if not started or not isinstance(store, Store):
        return None
    since_ms = float(started) * 1000
    mine = os.environ.get(COMMAND_ENV)
    runs = [
        r for r in store.runs_tagged(experiment_id, PARENT_TAG, parent_run_id)
        if (r.info.end_time or 0) >= since_ms and r.data.tags.get(COMMAND_TAG) == mine
    ]  # fmt: skip
    training = sum(float(r.data.metrics.get("train_time_s", 0.0)) for r in runs)
    earlier = sum(float(r.data.metrics.get(EARLIER_TRAIN_TIME, 0.0)) for r in runs)
    unknown = any(r.info.start_time < since_ms and EARLIER_TRAIN_TIME not in r.data.metrics for r in runs)
    return split_line(max(training - earlier, 0.0), measuring_s, time.time() - float(started), unknown, earlier)
