"""Which jobs of a sweep are done before a launcher starts any (the SLURM and one-node launchers).

A finished sweep's re-run allocates nothing and a partly done one starts only the rest: the store is
asked first (`already_done` in src/tracking/run_plan.py, read-only), and one line says how many were
skipped. Every other decision (resume, a lost run, a code change) stays the job's own, made by its
rank 0 (src/tracking/run_plan.py).
"""


from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from src.core.compositions import job_config
from src.core.paths import ConfigError
from src.core.terminal import say
from src.launch.sweep_end import JobFailed


def split_done(launcher: Any, job_overrides: Sequence[Sequence[str]], first: int) -> tuple[list[tuple[int, list[str]]], dict[int, JobReturn]]:
    """(the jobs to start, as (number, overrides); the results of the jobs already done, by number)."""
    from src.tracking.run_plan import already_done
    from src.tracking.store import Store
    from src.training.run_spec import resolve

    jobs = [(first + i, list(o)) for i, o in enumerate(job_overrides)]
    config = launcher.config
    if not config.logger.enabled:
        return jobs, {}
    store = Store.connect(config.logger.tracking_uri)
    pending, done = [], {}
    for num, overrides in jobs:
        try:
            cfg = job_config(config, overrides, launcher.hydra_context.config_loader)
            found = already_done(resolve(cfg, trains_here=False), store)
        except ConfigError:  # the job refuses itself, in its own words
            found = None
        if found is None:
            pending.append((num, overrides))
            continue
        result, line = found
        say(f"[normsweep] {line}")
        done[num] = JobReturn(overrides, cfg, None, os.getcwd(), str(config.hydra.job.name), JobStatus.COMPLETED, result.test_loss)
    if done:
        say(f"[normsweep] {len(done)} of {len(jobs)} jobs already finished: not started again; starting {len(pending)}")
    return pending, done


def in_order(first: int, count: int, returns: dict[int, JobReturn]) -> list[JobReturn]:
    return [returns[first + i] for i in range(count)]


def lost(overrides: list[str], why: str) -> JobReturn:
    """A job that ended without a result: one line, naming it and how to go on."""
    return JobReturn(overrides, None, None, None, None, JobStatus.FAILED, JobFailed(why))
