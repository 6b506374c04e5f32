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
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from src.paths import ConfigError, register_resolvers


def sweep_jobs(config: DictConfig) -> list[dict[str, Any]]:
    """Every job of the sweep as the basic sweeper will launch it: overrides, run name, fingerprint."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from src.config import validate
    from src.paths import compose
    from src.tracking.identity import fingerprint

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    batches = BasicSweeper.split_arguments(parser.parse_overrides(arguments), max_batch_size=None)
    jobs = []
    for overrides in (job for batch in batches for job in batch):
        cfg = compose(overrides)
        validate(cfg)  # a job that would be refused: no sweep run is recorded for it
        jobs.append({"num": len(jobs), "overrides": list(overrides), "run_name": cfg.run_name, "fingerprint": fingerprint(cfg)})
    return jobs


class MlflowSetup(Callback):
    """Open (or reopen) the sweep's parent run before any job starts; close it when the sweep ends.

    Each job opens the store again under its lock (src/store.py), which also protects processes
    this callback never sees (a second terminal, torchrun ranks, SLURM tasks).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        register_resolvers()
        if not config.logger.enabled or int(os.environ.get("RANK", "0")) != 0:
            return
        from mlflow.tracking import MlflowClient  # imported late: MLflow is slow to import

        from src.tracking import sweep
        from src.tracking.store import ensure_experiment, redact_text
        from src.tracking.summary import log_sweep_definition
        from src.tracking.tracker import git_commit
        from src.tracking.ui_view import publish_view

        try:
            jobs = sweep_jobs(config)
        except ConfigError as err:  # Hydra turns a callback's exception into a warning: say it, record nothing
            print(f"[normsweep] config error: {err}; no sweep run recorded", file=sys.stderr)
            return
        except Exception as err:  # another sweeper plugin: no job list, status groups runs instead
            print(f"[normsweep] note: sweep job list unavailable ({type(err).__name__}: {err})", file=sys.stderr)
            jobs = []
        experiment_id = ensure_experiment(config.logger.tracking_uri, config.experiment_name, config.logger.artifact_location)
        key = config.experiment_name + "".join(sorted(j["fingerprint"] for j in jobs)) if jobs else os.urandom(8).hex()
        sweep_id = hashlib.sha256(key.encode()).hexdigest()[:16]
        client = MlflowClient(config.logger.tracking_uri)
        publish_view(client, experiment_id)  # what the links printed for this sweep open on
        found = sweep.runs_tagged(client, experiment_id, sweep.SWEEP_ID_TAG, sweep_id, most=1)
        # Credentials in a tracking URI given on the command line never reach MLflow.
        command = redact_text("python -m src.train -m " + " ".join(shlex.quote(o) for o in config.hydra.overrides.task))
        if found:
            run_id = found[0].info.run_id
            client.update_run(run_id, status="RUNNING")
            client.set_tag(run_id, "outcome", "running")
        else:
            run = client.create_run(
                experiment_id,
                run_name=f"sweep-{config.experiment_name}",
                tags={
                    sweep.SWEEP_TAG: "true",
                    sweep.SWEEP_ID_TAG: sweep_id,
                    "outcome": "running",
                    "git_commit": git_commit(),
                    "mlflow.note.content": f"Sweep of {len(jobs)} jobs: `{command}`. Its jobs are nested below it.",
                },
            )
            run_id = run.info.run_id
            log_sweep_definition(client, run_id, jobs)
        client.set_tag(run_id, "sweep.command", command)
        definition = sweep.sweep_definition(config.experiment_name, command, run_id, jobs)
        client.log_text(run_id, definition, sweep.JOBS_ARTIFACT)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / sweep.JOBS_FILE).write_text(definition)
        os.environ[sweep.PARENT_ENV] = run_id  # the jobs (in this process or launched from it) nest under it
        print(f"[normsweep] sweep run {run_id}: {len(jobs)} jobs; re-run the same command to finish what is left", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from src.tracking import sweep
        from src.tracking.summary import VERDICT_TAG, sweep_note

        run_id = os.environ.pop(sweep.PARENT_ENV, None)
        if run_id is None:
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient(config.logger.tracking_uri)
        parent = client.get_run(run_id)
        children = sweep.runs_tagged(client, parent.info.experiment_id, sweep.PARENT_TAG, run_id, most=5000)
        states = [sweep.job_state(r, float(config.sweep.stale_after_s)) for r in children if sweep.SUPERSEDED_TAG not in r.data.tags]
        ok = all(s in sweep.RESULT_OUTCOMES for s in states)
        counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states)))
        client.set_tag(run_id, "outcome", "finished" if ok else "incomplete")
        client.set_tag(run_id, "sweep.jobs", counts or "none")
        jobs_sentence = (
            f"Sweep of {len(states)} jobs ({counts or 'none'}): `{parent.data.tags.get('sweep.command', '')}`. "
            "Its jobs are nested below it; the study's table and figures are under Artifacts → report/report.html."
        )
        # The report (Hydra ends callbacks in reverse order: it ran before this) put the verdict first.
        client.set_tag(run_id, "mlflow.note.content", sweep_note(jobs_sentence, parent.data.tags.get(VERDICT_TAG)))
        client.set_terminated(run_id, "FINISHED" if ok else "FAILED")
