"""Hydra callbacks that bracket a multirun: the sweep's parent run in MLflow, and its end.

A sweep is one MLflow parent run with every job nested under it (`mlflow.parentRunId`). The parent
holds the sweep's definition (the command, the sweeper's lists, each job's overrides and
fingerprint), so `python -m src.report --status` can name the jobs that never started. Its identity
is the experiment plus its jobs' fingerprints: re-running the identical command reopens the same
parent instead of adding one. Creating it also creates the store and experiment before any job.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from src.paths import ConfigError, register_resolvers

PARENT_WAIT_S = 60.0  # another copy of the sweep holds the claim on its parent run: wait this long for it


def sweep_jobs(config: DictConfig) -> list[dict[str, Any]]:
    """Every job of the sweep as the basic sweeper will launch it (the sequential one: its first round):
    overrides, run name, fingerprint."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from src.config import validate
    from src.launch.sequential import first_round_overrides
    from src.paths import compose
    from src.tracking.identity import fingerprint

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    # The sequential sweeper chooses the seeds: its job list is the first round's.
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task) + first_round_overrides(config)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    batches = BasicSweeper.split_arguments(parser.parse_overrides(arguments), max_batch_size=None)
    jobs = []
    for overrides in (job for batch in batches for job in batch):
        cfg = compose(overrides)
        validate(cfg)  # a job that would be refused: no sweep run is recorded for it
        jobs.append({"num": len(jobs), "overrides": list(overrides), "run_name": cfg.run_name, "fingerprint": fingerprint(cfg)})
    return jobs


def _claim_parent(store: Any, experiment_id: str, sweep_id: str, stale_after_s: float) -> tuple[Any, list[Any]]:
    """(this process's claim on creating the parent, or None; the parent runs already there).

    Without the claim, two copies started at once would each create a parent run, and each copy's
    jobs and report would land under a different one."""
    from src.tracking.sweep import claim
    from src.tracking.tags import SWEEP_ID_TAG

    deadline = time.monotonic() + PARENT_WAIT_S
    while True:
        held, _ = claim(store, experiment_id, f"sweep-{sweep_id}", stale_after_s)
        found = store.runs_tagged(experiment_id, SWEEP_ID_TAG, sweep_id, most=1)
        if held is not None or found or time.monotonic() > deadline:
            return held, found
        time.sleep(0.5)  # the other copy is creating it


class MlflowSetup(Callback):
    """Open (or reopen) the sweep's parent run before any job starts; close it when the sweep ends.

    The store is checked first, as each job checks it (src.tracking.store): a URI with credentials,
    a database path that is a folder, or a server that does not answer stops the sweep within
    seconds, before any job starts. Each job opens the store again under its lock, which also
    protects processes this callback never sees (a second terminal, torchrun ranks, SLURM tasks).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        register_resolvers()
        if not config.logger.enabled or int(os.environ.get("RANK", "0")) != 0:
            return
        from src.config import check_store_placement
        from src.tracking import sweep
        from src.tracking.git import git_state
        from src.tracking.store import Store, StoreError, redact_text
        from src.tracking.summary import log_sweep_definition
        from src.tracking.tags import (
            NOTE_TAG,
            OUTCOME_TAG,
            RUNNING,
            SWEEP_COMMAND_TAG,
            SWEEP_ID_TAG,
            SWEEP_TAG,
        )
        from src.tracking.ui_view import publish_view

        try:  # before the launcher submits anything
            check_store_placement(config)
        except ConfigError as err:
            raise SystemExit(f"config error: {err}") from None
        try:
            store = Store.connect(config.logger.tracking_uri)
        except StoreError as err:  # Hydra turns an Exception here into a warning: stop the sweep instead
            raise SystemExit(f"config error: {err}") from None
        try:
            jobs = sweep_jobs(config)
        except ConfigError as err:  # Hydra turns a callback's exception into a warning: say it, record nothing
            print(f"[normsweep] config error: {err}; no sweep run recorded", file=sys.stderr)
            return
        except Exception as err:  # another sweeper plugin: no job list, status groups runs instead
            print(f"[normsweep] note: sweep job list unavailable ({type(err).__name__}: {err})", file=sys.stderr)
            jobs = []
        experiment_id = store.experiment_id(config.experiment_name, config.logger.artifact_location)
        key = config.experiment_name + "".join(sorted(j["fingerprint"] for j in jobs)) if jobs else os.urandom(8).hex()
        sweep_id = hashlib.sha256(key.encode()).hexdigest()[:16]
        publish_view(store, experiment_id)  # what the links printed for this sweep open on
        # Credentials in a tracking URI never reach MLflow (they are refused anyway; redacting is cheap).
        command = redact_text("python -m src.train -m " + " ".join(shlex.quote(o) for o in config.hydra.overrides.task))
        # A copy of the same sweep started at the same time (another node) shares one parent run.
        held, found = _claim_parent(store, experiment_id, sweep_id, float(config.sweep.stale_after_s))
        if found:
            if held is not None:
                held.release()
            run_id = found[0].info.run_id
            store.reopen(run_id)
            store.set_tags(run_id, {OUTCOME_TAG: RUNNING})
        else:
            run_id = store.create_run(
                experiment_id,
                f"sweep-{config.experiment_name}",
                {
                    SWEEP_TAG: "true",
                    SWEEP_ID_TAG: sweep_id,
                    OUTCOME_TAG: RUNNING,
                    **git_state().tags(),
                    NOTE_TAG: f"Sweep of {len(jobs)} jobs: `{command}`. Its jobs are nested below it.",
                },
            )
            if held is not None:
                held.release()
            log_sweep_definition(store, run_id, jobs)
        store.set_tags(run_id, {SWEEP_COMMAND_TAG: command})
        definition = sweep.sweep_definition(config.experiment_name, command, run_id, jobs)
        store.log_text(run_id, definition, sweep.JOBS_ARTIFACT)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / sweep.JOBS_FILE).write_text(definition)
        os.environ[sweep.PARENT_ENV] = run_id  # the jobs (in this process or launched from it) nest under it
        from src.launch.sweep_end import open_parent

        open_parent(store, run_id, float(config.sweep.stale_after_s))  # closed on every exit path
        print(f"[normsweep] sweep run {run_id}: {len(jobs)} jobs; re-run the same command to finish what is left", flush=True)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        from src.launch import sweep_end

        if job_return.status == JobStatus.FAILED:
            err = job_return._return_value  # the exception (reading .return_value would raise it)
            sweep_end.job_failed(f"{sweep_end.describe_job(config)} failed: {type(err).__name__}: {err}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from src.launch import sweep_end
        from src.tracking import sweep

        os.environ.pop(sweep.PARENT_ENV, None)
        parent = sweep_end.armed()
        if parent is not None:
            parent.close_at_end()
            sweep_end.disarm()
