"""`python -m src.report --status [MULTIRUN_DIR]`: every job of a sweep with its state.

The job list comes from the multirun folder's `normsweep_jobs.json`, or from the experiment's
latest sweep run; an experiment of single runs lists one line per config seen. States: finished,
diverged, running (heartbeat age), preempted, lost, killed, failed, missing.
"""

from __future__ import annotations

from pathlib import Path

from src.core.tables import text_table
from src.report.read.runs import find_experiment, open_store
from src.tracking import sweep
from src.tracking.store import Store
from src.tracking.tags import RESULT_OUTCOMES as DONE


def load_definition(store: Store, experiment_id: str) -> dict:
    """The job list of the experiment's latest sweep run, else one job per config seen."""
    parent = sweep.latest_sweep_run(store, experiment_id)
    if parent is not None:
        try:
            return sweep.read_definition(store.read_text(parent.info.run_id, sweep.JOBS_ARTIFACT))
        except Exception:  # a report-only run has no job list
            pass
    return {"command": None, "jobs": sweep.fingerprint_groups(store, experiment_id)}


def status_text(experiment: str | None, tracking_uri: str, sweep_dir: Path | None, stale_after_s: float) -> str:
    store = open_store(tracking_uri)
    # A multirun folder's job list (`--sweep-dir`: the command line found it there) names its experiment.
    saved = sweep.read_definition((sweep_dir / sweep.JOBS_FILE).read_text()) if sweep_dir is not None else None
    experiment_id = find_experiment(store, experiment or saved["experiment"])
    definition = saved or load_definition(store, experiment_id)
    rows = sweep.status_rows(store, experiment_id, definition["jobs"], stale_after_s)
    header = ["job", "variant", "run", "state", "mlflow run", "overrides"]
    cells = [[r["job"], r["variant"], r["run_name"], r["state"], r["run_id"], r["overrides"]] for r in rows]
    table = text_table(header, cells)
    left = [r for r in rows if r["state"] not in DONE]
    command = definition.get("command")
    finish = f"to finish it, re-run: {command}" if command else "re-run the sweep's command to finish it"
    head = f"sweep status: experiment {experiment!r}, {len(rows)} jobs, {len(rows) - len(left)} done"
    return "\n".join([head, "", table, "", finish if left else "nothing left to do"])
