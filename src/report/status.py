"""`python -m src.report --status [MULTIRUN_DIR]`: every job of a sweep with its state.

The job list comes from the multirun folder's `normsweep_jobs.json`, or from the experiment's
latest sweep run; an experiment of single runs lists one line per config seen. States: finished,
diverged, running (heartbeat age), preempted, lost, killed, failed, missing.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlflow.tracking import MlflowClient

from src.report.runs import ReportError, find_experiment, open_client
from src.report.table import text_table
from src.tracking import sweep

DONE = sweep.RESULT_OUTCOMES


def load_definition(client: MlflowClient, experiment_id: str, sweep_dir: Path | None) -> dict:
    if sweep_dir is not None:
        path = sweep_dir / sweep.JOBS_FILE
        if not path.is_file():
            raise ReportError(f"{path} not found: not a multirun folder of this version (or the sweep never started)")
        return sweep.read_definition(path.read_text())
    parent = sweep.latest_sweep_run(client, experiment_id)
    if parent is not None:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one small file: no bar
        try:
            text = Path(client.download_artifacts(parent.info.run_id, sweep.JOBS_ARTIFACT)).read_text()
            return sweep.read_definition(text)
        except Exception:  # a report-only run has no job list
            pass
    return {"command": None, "jobs": sweep.fingerprint_groups(client, experiment_id)}


def status_text(experiment: str | None, tracking_uri: str, sweep_dir: Path | None, stale_after_s: float) -> str:
    client = open_client(tracking_uri)
    if sweep_dir is not None and experiment is None:
        experiment = sweep.read_definition((sweep_dir / sweep.JOBS_FILE).read_text())["experiment"]
    assert experiment is not None
    experiment_id = find_experiment(client, tracking_uri, experiment)
    definition = load_definition(client, experiment_id, sweep_dir)
    rows = sweep.status_rows(client, experiment_id, definition["jobs"], stale_after_s)
    header = ["job", "run", "state", "mlflow run", "overrides"]
    table = text_table(header, [[r["job"], r["run_name"], r["state"], r["run_id"], r["overrides"]] for r in rows])
    left = [r for r in rows if r["state"] not in DONE]
    lines = [f"sweep status: experiment {experiment!r}, {len(rows)} jobs, {len(rows) - len(left)} done", "", table, ""]
    if not left:
        lines.append("nothing left to do")
    elif definition.get("command"):
        lines.append(f"to finish it, re-run: {definition['command']}")
    else:
        lines.append("re-run the sweep's command to finish it")
    return "\n".join(lines)
