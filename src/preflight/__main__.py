"""`python -m src.preflight [-m] [key=value ...]`: check a run or a sweep before it starts, and
estimate its memory, time and cost.

    python -m src.preflight experiment=gpt2_small_study cluster=gpu_node
    python -m src.preflight -m experiment=gpt2_small_study cluster=slurm      every job of the sweep
    python -m src.preflight -m norm='glob(*)' seed=0,1,2 preflight.gpu=h100-80gb
    python -m src.preflight experiment=gpt2_small_study preflight.steps=1     + a dress rehearsal here

The arguments are those of `python -m src.train` (with `-m`/`--multirun`, the jobs Hydra's sweeper
would run). `preflight.*` sets the card, the assumed MFU and the rehearsal (their defaults: src/core/schema.py).
Nothing is trained or recorded. Exit status 1 means a job would fail (each reason on one line,
naming the field); 2 that the overrides do not compose (a wrong type, an unknown option), as for
`python -m src.train`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from omegaconf import DictConfig

from src.core import cli
from src.core.paths import ConfigError, compose
from src.preflight.cards import SettingError
from src.preflight.checks import Finding
from src.preflight.job import CheckpointLedger, JobReport, inspect_job
from src.preflight.jobs import expand_jobs
from src.preflight.memory import largest_fitting_micro_batch
from src.preflight.rehearsal import Rehearsal, available_bytes, rehearse
from src.preflight.table import render


def rehearsal_steps(pf: DictConfig) -> int:
    """`preflight.steps`, with it and `preflight.rehearsal_micro_batch` checked: settings of the
    preflight itself, so a wrong one refuses the command (status 2), whether or not a rehearsal runs."""
    steps, micro = pf.steps, pf.rehearsal_micro_batch
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise SettingError(f"preflight.steps: must be an integer >= 0 (0: no rehearsal), got {steps!r}")
    if micro is not None and (isinstance(micro, bool) or not isinstance(micro, int) or micro < 1):
        raise SettingError(f"preflight.rehearsal_micro_batch: must be an integer >= 1 or null (the largest that fits here), got {micro!r}")
    return steps


def rehearsal_micro_batch(job: JobReport) -> int:
    """`preflight.rehearsal_micro_batch`, else the largest micro-batch (up to the run's) that fits here."""
    assert job.cfg is not None and job.memory is not None
    pf, micro = job.cfg.preflight, int(job.cfg.optim.micro_batch_size)
    if pf.rehearsal_micro_batch is not None:
        return int(pf.rehearsal_micro_batch)
    fits = largest_fitting_micro_batch(micro, job.memory, int(available_bytes(job.cfg) * pf.memory_headroom))
    if fits < 1:
        raise ConfigError("preflight.steps: not even one sequence fits this machine's free memory; the rehearsal needs more")
    return min(micro, fits)


def maybe_rehearse(job: JobReport) -> Rehearsal | None:
    if job.cfg is None:
        return None
    steps = rehearsal_steps(job.cfg.preflight)
    if steps == 0 or job.memory is None or job.budget is None or "config" in job.findings:
        return None
    from src.training.run_spec import validate

    try:
        return rehearse(job.cfg, validate(job.cfg), job.budget, rehearsal_micro_batch(job), steps)
    except ConfigError as err:
        job.findings["rehearsal"] = Finding.failed("failed", str(err))
    except RuntimeError as err:  # out of memory, a kernel this device lacks
        job.findings["rehearsal"] = Finding.failed("failed", f"preflight.steps: the rehearsal failed: {str(err).splitlines()[0]}")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    made = cli.parser("python -m src.preflight", __doc__, "the overrides of python -m src.train (with -m: its sweep lists)")
    made.add_argument("-m", "--multirun", action="store_true", help="every job of the sweep the overrides describe")
    args = cli.parse(made, argv)
    return cli.run(lambda: check(args.overrides, args.multirun))


def check(overrides: list[str], multirun: bool) -> int:
    if not multirun:
        compose(overrides)  # a wrong type or an unknown option: a config error (status 2), as for src.train
    sweep = expand_jobs(overrides, multirun)
    if not sweep.jobs:  # as python -m src.train refuses it (src.launch.callbacks)
        raise ConfigError(f"{' '.join(overrides)}: the sweep has no jobs; nothing to check")
    ledger = CheckpointLedger()
    reports: list[JobReport] = []
    rehearsals: dict[int, Rehearsal] = {}
    jobs = sweep.jobs
    for index, job_overrides in enumerate(jobs):
        report = inspect_job(job_overrides, ledger)
        rehearsal = maybe_rehearse(report)
        if rehearsal is not None:
            rehearsals[index] = rehearsal
        reports.append(report)
        print(f"[preflight] job {index + 1}/{len(jobs)} {report.name}: checked", file=sys.stderr, flush=True)
    print(render(reports, rehearsals, sweep.rounds))
    return cli.FAILED if any(r.failures for r in reports) else cli.OK


if __name__ == "__main__":
    sys.exit(main())
