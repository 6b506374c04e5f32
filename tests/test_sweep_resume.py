"""A sweep is re-run, not restarted: after SIGKILL or SIGTERM the identical command finishes what is left."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, cli_env
from mlflow.tracking import MlflowClient

from src.core.paths import compose
from src.report.__main__ import main as report_main
from src.tracking.sweep import FINGERPRINT_TAG, SWEEP_TAG
from src.train import train

STEPS = 30
SWEEP = ["norm=hand_layernorm,torch_layernorm", "seed=0,1"]


def _overrides(tiny_overrides: list[str], experiment: str) -> list[str]:
    return [
        *tiny_overrides,
        f"experiment_name={experiment}",
        f"optim.max_steps={STEPS}",
        "val_every_n_steps=10",
        "checkpoint.enabled=true",
        "checkpoint.every_n_steps=2",
    ]


def _launch(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "src.train", "-m", *args],
        cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def _run(args: list[str]) -> str:
    proc = _launch(args)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    return out


def _runs(client: MlflowClient, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(SWEEP_TAG) != "true"]


def _stop_during(proc: subprocess.Popen[str], client: MlflowClient, experiment: str, job: str, sig: int) -> None:
    """Send `sig` once job number `job` has logged step 3 (its step-2 checkpoint is on disk)."""
    deadline = time.time() + 600
    while time.time() < deadline:
        assert proc.poll() is None, "the sweep ended before the fault"
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs([exp.experiment_id], filter_string=f"tags.hydra_job_num = '{job}'") if exp else []
        if runs and any(m.step >= 3 for m in client.get_metric_history(runs[0].info.run_id, "train/train_loss")):
            os.killpg(proc.pid, sig)
            proc.communicate(timeout=120)
            return
        time.sleep(0.1)
    raise AssertionError("job never reached step 3")


def _job_started(proc: subprocess.Popen[str], client: MlflowClient, experiment: str, job: str) -> None:
    """Wait until job number `job` has its MLflow run (the jobs before it have ended)."""
    deadline = time.time() + 600
    while time.time() < deadline:
        assert proc.poll() is None, "the sweep ended first"
        exp = client.get_experiment_by_name(experiment)
        if exp and client.search_runs([exp.experiment_id], filter_string=f"tags.hydra_job_num = '{job}'"):
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} never started")


def _sweep_run(client: MlflowClient, experiment: str):
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    (parent,) = [r for r in client.search_runs([exp_id]) if r.data.tags.get(SWEEP_TAG) == "true"]
    return parent


def _steps_unique(client: MlflowClient, run_id: str) -> None:
    steps = [m.step for m in client.get_metric_history(run_id, "train/train_loss")]
    assert sorted(steps) == list(range(1, STEPS + 1))


def _status(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert report_main(["--status", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.slow
def test_sigkill_then_rerun_finishes_what_is_left(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*SWEEP, *_overrides(tiny_overrides, "killed_sweep")]
    client = MlflowClient(store["uri"])
    proc = _launch(args)
    # A report taken while the sweep runs (job 0 done) reads it: printed, nothing written into it.
    _job_started(proc, client, "killed_sweep", "1")
    report_args = ["--experiment-name", "killed_sweep", f"paths.mlflow_db={store['db']}", f"paths.reports_dir={tmp_path / 'reports'}"]
    capsys.readouterr()
    assert report_main(report_args) == 0
    assert "is still running" in capsys.readouterr().out
    parent = _sweep_run(client, "killed_sweep")
    assert parent.info.status == "RUNNING" and not [k for k in parent.data.metrics if k.startswith("sweep/")]
    assert not client.list_artifacts(parent.info.run_id, "report") and not (tmp_path / "reports").exists()
    _stop_during(proc, client, "killed_sweep", "2", signal.SIGKILL)
    before = {r.data.tags["hydra_job_num"]: r for r in _runs(client, "killed_sweep")}
    assert sorted(before) == ["0", "1", "2"] and before["2"].info.status == "RUNNING"  # left RUNNING by the kill

    # The status view names every job of the sweep: two done, one lost, one never started.
    status = _status(capsys, "--experiment-name", "killed_sweep", f"paths.mlflow_db={store['db']}")
    assert status.count(" finished ") == 2 and "lost (no heartbeat" in status and " missing " in status
    user_path = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    assert f"to finish it, re-run: {user_path}python -m src.train -m" in status  # the user's PYTHONPATH kept

    out = _run(args)
    assert out.count("skipped, run") == 2 and "resuming from its checkpoint" in out
    assert "nothing left to do" in _status(capsys, "--experiment-name", "killed_sweep", f"paths.mlflow_db={store['db']}")
    after = _runs(client, "killed_sweep")
    assert len(after) == 4  # jobs 1-2 skipped, job 3 resumed into its run, job 4 new
    assert {r.info.run_id for r in after} >= {r.info.run_id for r in before.values()}
    assert all(r.info.status == "FINISHED" and r.data.tags["outcome"] == "finished" for r in after)
    assert len({r.data.tags[FINGERPRINT_TAG] for r in after}) == 4
    resumed = client.get_run(before["2"].info.run_id)
    assert resumed.data.tags["resumed"] == "true"
    for run in after:
        _steps_unique(client, run.info.run_id)

    # Job 3 ends where an uninterrupted run of the same config ends.
    reference = train(compose([*_overrides(tiny_overrides, "reference"), "norm=torch_layernorm", "seed=0",
                               "logger=none", f"checkpoint.dir={tmp_path / 'ref'}"]))
    m = resumed.data.metrics
    assert m["final_train_loss"] == pytest.approx(reference.final_train_loss, abs=1e-5)
    assert m["test_loss"] == pytest.approx(reference.test_loss, abs=1e-5)

    aggregates = [k for k in _sweep_run(client, "killed_sweep").data.metrics if k.startswith("sweep/")]
    assert aggregates  # the report at the sweep's end
    out = _run(args)  # a third run: nothing left to do
    assert out.count("skipped, run") == 4
    assert len(_runs(client, "killed_sweep")) == 4
    parent = _sweep_run(client, "killed_sweep")
    assert parent.info.status == "FINISHED"
    for key in aggregates:  # the same report again: no second row of the same numbers
        assert len(client.get_metric_history(parent.info.run_id, key)) == 1, key


@pytest.mark.slow
def test_sigterm_on_defaults_preempts_and_rerun_resumes(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default progress bar is on: SIGTERM handling must not depend on the callbacks' order.
    args = ["norm=hand_rmsnorm", *_overrides(tiny_overrides, "preempted_sweep"), "progress_bar=true"]
    client = MlflowClient(store["uri"])
    proc = _launch(args)
    _stop_during(proc, client, "preempted_sweep", "0", signal.SIGTERM)
    assert proc.returncode == 0
    (run,) = _runs(client, "preempted_sweep")
    assert run.info.status == "KILLED" and run.data.tags["outcome"] == "preempted"
    exp_id = client.get_experiment_by_name("preempted_sweep").experiment_id
    (parent,) = [r for r in client.search_runs([exp_id]) if r.data.tags.get(SWEEP_TAG) == "true"]
    assert parent.info.status == "KILLED" and parent.data.tags["outcome"] == "preempted"  # not left RUNNING

    out = _run(args)
    assert "resuming from its checkpoint" in out
    (after,) = _runs(client, "preempted_sweep")
    sweep_dir = next((tmp_path / "multirun").glob("**/normsweep_jobs.json")).parent
    status = _status(capsys, "--sweep-dir", str(sweep_dir), f"paths.mlflow_db={store['db']}")
    assert "hand_rmsnorm-s0" in status and " finished " in status
    assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"
    _steps_unique(client, run.info.run_id)
    # Where the time went: this command's own training, the earlier attempt's said apart (before:
    # `training at most 80 s (126%), the rest 0 s (0%)`, both attempts counted as this command's).
    earlier, total = after.data.metrics["earlier_train_time_s"], after.data.metrics["train_time_s"]
    assert 0 < earlier < total
    split = " ".join(out[out.index("[normsweep] where the time went: "):].split())
    found = re.search(r"in all: training ([\d,]+) s \(\d+%\) \(and ([\d,]+) s in earlier attempts of resumed jobs\)", split)
    assert found and "at most" not in split, split[:300]
    assert int(found[1]) == round(total - earlier) and int(found[2]) == round(earlier), (split[:300], total, earlier)
