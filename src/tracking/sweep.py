"""A sweep as the unit of work: find what a job already produced, decide what is left, show status.

Every training run carries its identity (`src.tracking.identity.fingerprint`) as a tag, with the host, pid,
start time and a heartbeat. Before a multirun job trains, `decide` searches the experiment for the
latest run with the same fingerprint (not superseded) and returns one action:

    finished / diverged run             -> skip: the result is already recorded
    RUNNING, heartbeat fresh, pid alive -> busy: someone else is training it; skip with a warning
    RUNNING, stale or pid gone          -> mark it KILLED/outcome=lost, then as pre-empted:
    pre-empted / lost / killed          -> resume it from its checkpoint (same MLflow run) if the
                                           checkpoint belongs to it, else start a new run
    failed                              -> start a new run; the old one is tagged superseded_by

`sweep.on_existing=rerun` always starts new runs (a changed method), `fail` refuses to run a config
that already has runs. A sweep's parent run (MLflow nested runs) holds the job list, so `status`
can also name the jobs that never started. Torch-free.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from src.paths import ConfigError

FINGERPRINT_TAG = "normsweep.fingerprint"
HEARTBEAT_TAG = "normsweep.heartbeat"  # unix time of the last sign of life
HOST_TAG = "normsweep.host"
PID_TAG = "normsweep.pid"
STARTED_TAG = "normsweep.started_at"
SUPERSEDED_TAG = "normsweep.superseded_by"
SWEEP_TAG = "normsweep.sweep"  # "true" on a sweep's parent run (not a training run)
SWEEP_ID_TAG = "normsweep.sweep_id"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting tag
PARENT_ENV = "NORMSWEEP_PARENT_RUN_ID"  # the parent run of the jobs this process launches
JOBS_ARTIFACT = "sweep/jobs.json"
JOBS_FILE = "normsweep_jobs.json"  # the same list in the multirun folder
POLICIES = ("resume", "rerun", "fail")
RESULT_OUTCOMES = ("finished", "diverged")
# A run is FINISHED only once these are in MLflow: without them the report would miss its seed.
REQUIRED_FINAL_METRICS = ("test_loss", "final_train_loss", "steps_done", "train_time_s")
INTERRUPTED_OUTCOMES = ("preempted", "lost", "killed")


@dataclass
class Decision:
    action: str  # new | skip | resume | busy
    run: Run | None = None  # the existing run it concerns
    reason: str = ""
    supersede: list[str] = field(default_factory=list)  # runs the new run replaces


def liveness_tags() -> dict[str, str]:
    now = f"{time.time():.0f}"
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()), STARTED_TAG: now, HEARTBEAT_TAG: now}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def heartbeat_age_s(run: Run, now: float | None = None) -> float:
    tags = run.data.tags
    last = float(tags.get(HEARTBEAT_TAG) or tags.get(STARTED_TAG) or run.info.start_time / 1000)
    return (now or time.time()) - last


def is_alive(run: Run, stale_after_s: float) -> bool:
    """A RUNNING run is alive while its heartbeat is fresh and, on this host, its process exists."""
    tags = run.data.tags
    same_host = tags.get(HOST_TAG) == socket.gethostname() and tags.get(PID_TAG, "").isdigit()
    # On this host a dead pid (or our own: a run this very process left behind) settles it at once.
    if same_host and (not pid_alive(int(tags[PID_TAG])) or int(tags[PID_TAG]) == os.getpid()):
        return False
    return heartbeat_age_s(run) < stale_after_s


def runs_tagged(client: MlflowClient, experiment_id: str, tag: str, value: str, most: int = 1000) -> list[Run]:
    """The experiment's live runs with `tag` = `value`, latest first."""
    return client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{tag}` = '{value}'",
        run_view_type=ViewType.ACTIVE_ONLY,
        order_by=["attributes.start_time DESC"],
        max_results=most,
    )


def runs_with_fingerprint(client: MlflowClient, experiment_id: str, fp: str) -> list[Run]:
    """Training runs of this identity, latest first, superseded ones left out."""
    return [r for r in runs_tagged(client, experiment_id, FINGERPRINT_TAG, fp) if SUPERSEDED_TAG not in r.data.tags]


def mark_lost(client: MlflowClient, run: Run) -> None:
    client.set_tag(run.info.run_id, "outcome", "lost")
    client.set_terminated(run.info.run_id, "KILLED")


def settle_lost(client: MlflowClient, experiment_id: str, fp: str, stale_after_s: float) -> list[str]:
    """Mark KILLED (`outcome=lost`) the RUNNING runs of this identity whose process is gone.

    A SIGKILL leaves a run RUNNING; the next run of its config (a single run as well as a sweep's
    job, through `decide`) settles it instead of leaving it RUNNING forever.
    """
    lost = [r for r in runs_with_fingerprint(client, experiment_id, fp) if r.info.status == "RUNNING"]
    lost = [r for r in lost if not is_alive(r, stale_after_s)]
    for run in lost:
        mark_lost(client, run)
    return [r.info.run_id for r in lost]


def supersede(client: MlflowClient, old_run_ids: Sequence[str], new_run_id: str) -> None:
    for run_id in old_run_ids:
        client.set_tag(run_id, SUPERSEDED_TAG, new_run_id)


def decide(
    client: MlflowClient,
    experiment_id: str,
    fp: str,
    policy: str,
    stale_after_s: float,
    checkpoint_of: Callable[[Run], bool],
) -> Decision:
    """What a job with fingerprint `fp` should do; `checkpoint_of(run)`: a checkpoint of that run exists."""
    runs = runs_with_fingerprint(client, experiment_id, fp)
    if not runs:
        return Decision("new")
    latest = runs[0]
    if policy == "fail":
        raise ConfigError(
            f"sweep.on_existing=fail: run {latest.info.run_id} ({latest.info.run_name}) already has this config "
            f"(fingerprint {fp}); valid choices: {', '.join(POLICIES)}"
        )
    if policy == "rerun":
        return Decision("new", latest, "sweep.on_existing=rerun", [r.info.run_id for r in runs if r.info.status != "RUNNING"])
    outcome = latest.data.tags.get("outcome", "")
    if latest.info.status == "RUNNING":
        if is_alive(latest, stale_after_s):
            age = heartbeat_age_s(latest)
            host = latest.data.tags.get(HOST_TAG, "?")
            return Decision("busy", latest, f"running on {host} (heartbeat {age:.0f} s ago)")
        mark_lost(client, latest)
        outcome = "lost"
    missing = [k for k in REQUIRED_FINAL_METRICS if k not in latest.data.metrics]
    if latest.info.status == "FINISHED" and outcome == "finished" and missing:
        # Closed FINISHED without its results (older versions did, after a kill in the test phase).
        outcome = f"finished without {', '.join(missing)}"
        if checkpoint_of(latest):
            return Decision("resume", latest, f"{outcome}; resuming from its checkpoint")
        return Decision("new", latest, f"{outcome}; starting a new run", [latest.info.run_id])
    if latest.info.status == "FINISHED" or outcome in RESULT_OUTCOMES:
        return Decision("skip", latest, f"already {outcome or 'finished'}")
    if outcome in INTERRUPTED_OUTCOMES or latest.info.status == "KILLED":
        if checkpoint_of(latest):
            return Decision("resume", latest, f"{outcome or 'killed'}; resuming from its checkpoint")
        return Decision("new", latest, f"{outcome or 'killed'} without a checkpoint", [latest.info.run_id])
    return Decision("new", latest, f"{outcome or 'failed'}; starting a new run", [latest.info.run_id])


# --- the sweep's job list and status ---------------------------------------------------------


def sweep_definition(experiment: str, command: str, parent_run_id: str, jobs: Sequence[dict[str, Any]]) -> str:
    """The sweep as JSON: written to the multirun folder and to the parent run."""
    body = {"experiment": experiment, "command": command, "parent_run_id": parent_run_id, "jobs": list(jobs)}
    return json.dumps(body, indent=1)


def read_definition(text: str) -> dict[str, Any]:
    return json.loads(text)


def job_state(run: Run | None, stale_after_s: float) -> str:
    if run is None:
        return "missing"
    outcome = run.data.tags.get("outcome", "")
    if run.info.status == "RUNNING":
        if is_alive(run, stale_after_s):
            return f"running (heartbeat {heartbeat_age_s(run):.0f} s ago)"
        return "lost (no heartbeat; a re-run resumes it)"
    if run.info.status == "FINISHED":
        return "finished"
    return outcome if outcome in (*RESULT_OUTCOMES, *INTERRUPTED_OUTCOMES, "failed") else "failed"


def status_rows(
    client: MlflowClient, experiment_id: str, jobs: Sequence[dict[str, Any]], stale_after_s: float
) -> list[dict[str, str]]:
    """One row per job of the sweep definition: its run (latest of its fingerprint) and state."""
    # The overrides every job shares (paths, the experiment, ...) are the command's, not the job's.
    shared = set.intersection(*(set(j.get("overrides", [])) for j in jobs)) if len(jobs) > 1 else set()
    rows = []
    for job in jobs:
        runs = runs_with_fingerprint(client, experiment_id, job["fingerprint"])
        run = runs[0] if runs else None
        rows.append(
            {
                "job": str(job.get("num", len(rows))),
                "run_name": job.get("run_name", ""),
                "overrides": " ".join(o for o in job.get("overrides", []) if o not in shared),
                "state": job_state(run, stale_after_s),
                "run_id": run.info.run_id if run else "-",
            }
        )
    return rows


def fingerprint_groups(client: MlflowClient, experiment_id: str) -> list[dict[str, Any]]:
    """Without a job list: one pseudo-job per fingerprint seen in the experiment."""
    seen: dict[str, dict[str, Any]] = {}
    for run in client.search_runs([experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=5000):
        fp = run.data.tags.get(FINGERPRINT_TAG)
        if fp and fp not in seen:
            seen[fp] = {"num": len(seen), "fingerprint": fp, "run_name": run.info.run_name, "overrides": []}
    return list(seen.values())


def latest_sweep_run(client: MlflowClient, experiment_id: str) -> Run | None:
    runs = runs_tagged(client, experiment_id, SWEEP_TAG, "true", most=1)
    return runs[0] if runs else None
