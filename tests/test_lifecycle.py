"""A run's life from start to final results: whatever point it is stopped at, the re-run or
`resume=true` ends FINISHED with every final metric in MLflow, written exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
from helpers import REPO, TINY_MODEL, checkpointed, cli_env, run_cli, run_train
from mlflow.tracking import MlflowClient

import src.training.run_life as run_life_module
from src.core.paths import compose
from src.launch.sweep_end import REASON_TAG
from src.tracking.record import RunResult
from src.tracking.run_plan import decide_job, settle_lost
from src.tracking.store import Store
from src.tracking.sweep import (
    FINGERPRINT_TAG,
    PID_TAG,
    REQUIRED_FINAL_METRICS,
    SWEEP_TAG,
    liveness_tags,
)
from src.tracking.tracker import Tracker
from src.train import train

STEPS = 8
FINAL = (*REQUIRED_FINAL_METRICS, "avg_tokens_per_sec", "n_params", "peak_memory_mb")


class Stopped(BaseException):
    """A stop that no `except Exception` catches, like a kill: the run is left as it was."""


def _cfg(overrides: list[str], tmp_path: Path, *extra: str):
    return compose([*checkpointed(overrides, tmp_path, STEPS), *extra])


class StopAtTrainEnd(L.Callback):
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        raise Stopped("after the last step, before the end-of-training checkpoint")


class StopDuringTest(L.Callback):
    def on_test_batch_start(self, *args: object) -> None:
        raise Stopped("during the test phase")


def _stop_after_final_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    log_final = Tracker.log_final

    def stop(self: Tracker, *args: object, **kwargs: object) -> None:
        log_final(self, *args, **kwargs)
        raise Stopped("after the final metrics, before the run is closed")

    monkeypatch.setattr(Tracker, "log_final", stop)


def _with_callback(monkeypatch: pytest.MonkeyPatch, fault: L.Callback) -> None:
    class WithFault(run_life_module.RunCallbacks):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.extra.append(fault)

    monkeypatch.setattr(run_life_module, "RunCallbacks", WithFault)


def _assert_final_once(client: MlflowClient, run_id: str, reference: RunResult) -> None:
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "finished"
    for key in FINAL:
        assert len(client.get_metric_history(run_id, key)) == 1, key
    assert run.data.metrics["test_loss"] == pytest.approx(reference.test_loss, rel=1e-5)
    assert run.data.metrics["final_train_loss"] == pytest.approx(reference.final_train_loss, rel=1e-5)
    assert run.data.metrics["steps_done"] == STEPS
    steps = [m.step for m in client.get_metric_history(run_id, "train/train_loss")]
    assert sorted(steps) == list(range(1, STEPS + 1))


@pytest.fixture(scope="module")
def reference(token_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The same run uninterrupted, untracked: trained once for the module."""
    root = tmp_path_factory.mktemp("reference")
    paths = [f"paths.cache_dir={token_cache_dir}", f"paths.checkpoints_dir={root}", f"paths.reports_dir={root}"]
    return train(_cfg([*TINY_MODEL, *paths], root, "logger=none"))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["end_of_training", "test", "final_logging"])
def test_stopped_at_a_phase_boundary_then_resumed_logs_final_results_once(
    point: str,
    reference: RunResult,
    tiny_overrides: list[str],
    store: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if point == "end_of_training":
        _with_callback(monkeypatch, StopAtTrainEnd())
    elif point == "test":
        _with_callback(monkeypatch, StopDuringTest())
    else:
        _stop_after_final_logging(monkeypatch)
    with pytest.raises(Stopped):
        train(_cfg(tiny_overrides, tmp_path, "experiment_name=stopped"))
    client = MlflowClient(store["uri"])
    (stopped,) = client.search_runs([client.get_experiment_by_name("stopped").experiment_id])
    assert stopped.info.status != "FINISHED"

    monkeypatch.undo()
    resumed = train(_cfg(tiny_overrides, tmp_path, "experiment_name=stopped", "resume=true"))
    assert resumed.run_id == stopped.info.run_id
    assert resumed.test_loss == pytest.approx(reference.test_loss, rel=1e-5)
    _assert_final_once(client, stopped.info.run_id, reference)


def _sweep_args(tiny_overrides: list[str], experiment: str) -> list[str]:
    return [
        "-m",
        *tiny_overrides,
        f"experiment_name={experiment}",
        f"optim.max_steps={STEPS}",
        "optim.lr=3e-3",
        "checkpoint.enabled=true",
        "checkpoint.every_n_steps=3",
    ]


def _killed_at(point: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "tests" / "fault_job.py"), point, *args],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow
def test_sigkill_during_test_phase_then_rerun_records_final_metrics(
    reference: RunResult, tiny_overrides: list[str], store: dict[str, str]
) -> None:
    args = _sweep_args(tiny_overrides, "killed_in_test")
    killed = _killed_at("test", args)
    assert killed.returncode == -9, killed.stderr[-2000:]
    client = MlflowClient(store["uri"])
    exp = client.get_experiment_by_name("killed_in_test")
    (job,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(SWEEP_TAG) != "true"]
    assert job.info.status == "RUNNING" and "test_loss" not in job.data.metrics

    again = run_cli("src.train", *args)  # the identical command
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from its checkpoint" in again.stdout
    _assert_final_once(client, job.info.run_id, reference)
    (parent,) = _sweep_parents(client)  # left RUNNING by the kill, reopened and closed by the re-run
    assert parent.info.status == "FINISHED" and parent.data.tags["outcome"] == "finished"


@pytest.mark.slow
def test_sigkill_writing_the_end_checkpoint_then_resume_reports_the_last_steps_loss(
    reference: RunResult, tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    # Every 4 of 8 steps: the periodic checkpoint of the last step is what the resume starts from.
    args = [*tiny_overrides, "experiment_name=killed_writing", f"optim.max_steps={STEPS}", "optim.lr=3e-3",
            "checkpoint.enabled=true", "checkpoint.every_n_steps=4", f"checkpoint.dir={tmp_path / 'ckpt'}"]
    killed = _killed_at("end_checkpoint_write", args)  # a single run, killed after its last step
    assert killed.returncode == -9, killed.stderr[-2000:]
    partial = lambda: list((tmp_path / "ckpt").glob(".last.ckpt.*.tmp"))  # noqa: E731
    assert len(partial()) == 1  # the write the kill cut short
    client = MlflowClient(store["uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("killed_writing").experiment_id])
    assert run.info.status == "RUNNING" and "test_loss" not in run.data.metrics

    resumed = train(compose([*args, "resume=true"]))
    assert resumed.run_id == run.info.run_id
    # The last step's loss (it came out as the step before's when the checkpoint was written first).
    assert resumed.final_train_loss == pytest.approx(reference.final_train_loss, rel=1e-5)
    assert partial() == []  # removed when the run started again in its folder
    _assert_final_once(client, run.info.run_id, reference)


def _sweep_parents(client: MlflowClient) -> list:
    return [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
            if r.data.tags.get(SWEEP_TAG) == "true"]


def test_refused_seed_under_multirun_names_it_and_leaves_nothing_running(
    tiny_overrides: list[str], store: dict[str, str]
) -> None:
    proc = run_train("-m", *tiny_overrides, "seed=-1", "experiment_name=bad_seed")  # the entry point, in this process
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "seed: must be an integer in [0, 4294967295], got -1" in out and "Traceback" not in out
    if Path(store["db"]).exists():
        client = MlflowClient(store["uri"])
        assert [r for r in _sweep_parents(client) if r.info.status == "RUNNING"] == []


@pytest.mark.slow
def test_job_refused_after_the_sweep_started_closes_its_parent_with_the_reason(
    tiny_overrides: list[str], store: dict[str, str]
) -> None:
    # Valid as a config (the sweep-start checks pass, the parent run opens), refused by the job itself;
    # a process of its own: the parent is closed as the process ends.
    proc = run_cli("src.train", "-m", *tiny_overrides, "cluster.devices=2", "experiment_name=refused_job")
    assert proc.returncode == 2 and "config error: cluster: 2 processes inside a multirun" in proc.stderr
    (parent,) = _sweep_parents(MlflowClient(store["uri"]))
    assert parent.info.status == "FAILED" and parent.data.tags["outcome"] == "failed"
    assert "cluster: 2 processes inside a multirun" in parent.data.tags[REASON_TAG]


@pytest.mark.usefixtures("migrated_store")
def test_a_run_left_running_by_sigkill_is_settled_by_the_next_run_of_its_config(store: dict[str, str]) -> None:
    client = MlflowClient(store["uri"])
    door = Store.connect(store["uri"])
    exp = door.experiment_id("settle", store["artifacts"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    def running(pid: int) -> str:
        tags = {**liveness_tags(), PID_TAG: str(pid), FINGERPRINT_TAG: "fp", "outcome": "running"}
        return client.create_run(exp, tags=tags).info.run_id

    killed, alive = running(dead.pid), running(os.getppid())  # the parent process of this test is alive
    assert settle_lost(door, exp, "fp", stale_after_s=300) == [killed]
    assert client.get_run(killed).info.status == "KILLED" and client.get_run(killed).data.tags["outcome"] == "lost"
    assert client.get_run(alive).info.status == "RUNNING"


@pytest.mark.usefixtures("migrated_store")
def test_a_run_finished_without_its_final_metrics_is_not_skipped(store: dict[str, str]) -> None:
    client = MlflowClient(store["uri"])
    door = Store.connect(store["uri"])
    exp = door.experiment_id("no_results", store["artifacts"])
    run_id = client.create_run(exp, tags={FINGERPRINT_TAG: "fp", "outcome": "finished"}).info.run_id
    client.log_metric(run_id, "train_time_s", 1.0)
    client.set_terminated(run_id, "FINISHED")  # as older versions closed a run killed in its test phase

    with_checkpoint = decide_job(door, exp, "fp", "resume", 300, lambda run: True)
    assert with_checkpoint.action == "resume" and "without test_loss" in with_checkpoint.reason
    without = decide_job(door, exp, "fp", "resume", 300, lambda run: False)
    assert without.action == "new" and without.supersede == [run_id]


def test_a_failed_single_run_gives_the_sweep_callback_nothing_to_raise() -> None:
    """Outside a multirun Hydra still calls on_job_end, and `hydra.job.num` is missing (`???`)."""
    from hydra.core.utils import JobReturn, JobStatus

    from src.launch.callbacks import MlflowSetup
    from src.launch.sweep_end import describe_job

    cfg = compose([], with_hydra=True)  # a single run's config: hydra.job.num is ???
    failed = JobReturn()
    failed.status, failed.return_value = JobStatus.FAILED, RuntimeError("out of memory")
    MlflowSetup().on_job_end(cfg, failed)  # raised MissingMandatoryValue (Hydra printed it as a warning)
    assert describe_job(cfg) == "the job (torch_layernorm-s0)"
