"""A plain `mlflow server` (SQLite behind it) killed mid-run, then started again: the job ends in one
true line, printed once; the identical command resumes the run, and every step is in every curve
exactly once, the steps the dead server never acknowledged included (src/tracking/unsent.py)."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import first_checkpoint, launch_sweep, node_sweep_args, training_runs
from mlflow.tracking import MlflowClient

from src.core.paths import compose
from src.core.ports import free_port
from src.tracking.team_server import TeamServer
from src.tracking.unsent import UNSENT_FILE
from src.train import train

STEPS = 80  # long enough that the job is still training when the server dies after its first checkpoint
EVERY = 5  # steps between checkpoints
CURVES = ("train/train_loss", "train/lr", "train/grad_norm")


class SqliteServer(TeamServer):
    """`mlflow server` on a SQLite file: the team server's process handling, without PostgreSQL."""

    @property
    def backend_uri(self) -> str:
        return f"sqlite:///{self.state_dir / 'mlflow.db'}"


@pytest.mark.slow  # a real server, started twice, and two CLI jobs
def test_a_server_killed_mid_run_leaves_no_hole_in_the_curves(
    token_cache_dir: Path, tmp_path: Path, tiny_overrides: list[str], store_template: Path
) -> None:
    server = SqliteServer(tmp_path / "server", free_port(), free_port())
    server.state_dir.mkdir(parents=True)
    # The session's migrated store as the server's file: a fresh one costs MLflow's migrations at the
    # server's start (seconds), and a store's creation is not what this test checks.
    shutil.copyfile(store_template, server.state_dir / "mlflow.db")
    server.start_mlflow()
    try:
        experiment = "server_death"
        args = node_sweep_args(tmp_path, token_cache_dir, server.uri, experiment, "norm=torch_layernorm", "seed=0",
                          f"optim.max_steps={STEPS}", f"val_every_n_steps={STEPS}", "optim.lr=3e-3",
                          "checkpoint.enabled=true", f"checkpoint.every_n_steps={EVERY}")  # fmt: skip
        # Killed for good: its wait for a restart cut short (helpers.SHORT_RESTART_WAIT), the line the same.
        proc = launch_sweep(tmp_path, *args, short_restart_wait=True)
        first_checkpoint(proc, tmp_path)  # step 5
        server.kill_mlflow()
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode != 0, out[-3000:]

        # One line, once, and true: the run stays RUNNING (a dead server cannot be told it ended).
        said = [line for line in out.splitlines() if "stopped answering" in line]
        assert len(said) == 1, out[-3000:]
        assert "stays RUNNING" in said[0] and "closed FAILED" not in said[0], said
        assert f"continue from {next((tmp_path / 'checkpoints').rglob('last.ckpt'))}" in said[0], said
        folder = next((tmp_path / "checkpoints").rglob("last.ckpt")).parent

        server.start_mlflow()  # the same database: what it acknowledged is there
        client = MlflowClient(server.uri)
        (before,) = training_runs(client, experiment)
        assert before.info.status == "RUNNING"
        had = sorted(m.step for m in client.get_metric_history(before.info.run_id, "train/train_loss"))
        print(f"before the resume: {len(had)} steps stored (last {max(had, default=0)}); unsent kept: {(folder / UNSENT_FILE).exists()}")

        resumed = launch_sweep(tmp_path, *args)
        out, _ = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, out[-3000:]
        (run,) = training_runs(client, experiment)
        assert run.info.run_id == before.info.run_id and run.info.status == "FINISHED"
        for key in CURVES:  # every step exactly once (was: a hole between the last stored and the checkpoint)
            steps = Counter(m.step for m in client.get_metric_history(run.info.run_id, key))
            assert sorted(steps) == list(range(1, STEPS + 1)) and set(steps.values()) == {1}, (key, steps)
        assert not (folder / UNSENT_FILE).exists()  # sent, then removed

        reference = train(compose([*tiny_overrides, "norm=torch_layernorm", "seed=0", f"optim.max_steps={STEPS}",
                                   f"val_every_n_steps={STEPS}", "optim.lr=3e-3", "logger=none",
                                   "checkpoint.enabled=false"]))  # fmt: skip
        assert run.data.metrics["test_loss"] == pytest.approx(reference.test_loss, abs=1e-5)
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/train_loss")}
        assert history[STEPS] == pytest.approx(reference.final_train_loss, abs=1e-5)
    finally:
        server.kill_mlflow()


def test_a_long_cause_is_cut_at_a_word() -> None:
    """Before: the last 200 characters, from inside a word ("og-batch failed with ...")."""
    from src.tracking.server_client import CAUSE_MAX, _short_cause

    text = "API request to http://127.0.0.1:1/api/2.0/mlflow/runs/log-batch failed: " + "the reason goes on " * 20
    cause = _short_cause(text, "http://127.0.0.1:1")
    assert cause.startswith("...") and len(cause) <= CAUSE_MAX + 3
    assert cause[3:].split(" ")[0] in text.split(" "), cause  # a whole word first


@pytest.mark.slow  # a team server of its own, whose PostgreSQL is killed under a run
def test_a_database_dead_under_a_run_is_said_as_such() -> None:
    """PostgreSQL killed while a run logs its metrics: the server answers HTTP 503. Before: "the
    tracking server stopped answering while logging metrics (og-batch failed with exception ...)"."""
    import os
    import shutil
    import signal

    from src.tracking.server_client import server_lost
    from src.tracking.store import Store

    server = TeamServer.start(fast=True)
    try:
        store = Store.connect(server.uri)
        run_id = store.create_run(store.experiment_id("database_death", None), "torch_layernorm-s0", {})
        os.kill(int((server.pgdata / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)
        (future,) = store.log_metrics_in_background(run_id, {"train/train_loss": 5.0}, 1, int(time.time() * 1000))
        err = future.exception(timeout=300)
        assert err is not None
        line = str(server_lost(server.uri, err, "logging metrics"))
        print(line)
        assert line.startswith(
            f"logger.tracking_uri={server.uri}: the tracking server answered HTTP 503 Service Unavailable while "
            "logging metrics: its database stopped answering (its PostgreSQL; the team server's terminal says why); its MLflow run"
        ), line
        assert "once the team server is back (stop it if it still runs, and start it again: python -m src.tracking.team_server --dir" in line
        assert "og-batch" not in line and "stopped answering while" not in line
    finally:
        server.postgres_started = False  # killed: nothing to stop
        server.kill_mlflow(signal.SIGKILL)
        server.stop()
        shutil.rmtree(server.state_dir, ignore_errors=True)
