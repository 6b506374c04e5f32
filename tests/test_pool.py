"""Parallel multirun jobs on one machine (cluster=cpu_pool): real jobs, separate worker processes, one store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import run_cli
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from src.core.paths import ConfigError, compose
from src.launch.pool import core_share
from src.tracking.sweep import SWEEP_TAG
from src.training.run_spec import validate

POOL_ROUNDS = 2  # a fresh store each round; the store lock, not luck, is what makes every round pass
SLOT_LINE = re.compile(r"\[normsweep\] job (\d+) in worker slot (\d+) \(pid (\d+)\): core\(s\) ([\d,]+)")


@pytest.mark.slow
def test_four_jobs_on_two_workers_into_a_fresh_store(tiny_overrides: list[str], tmp_path: Path) -> None:
    """Twice over: a fresh SQLite store, four jobs two at a time, every run FINISHED."""
    base = [o for o in tiny_overrides if not o.startswith(("paths.mlflow_db=", "hydra.sweep.dir="))]
    for round_ in range(POOL_ROUNDS):
        db = tmp_path / f"round{round_}" / "mlflow.db"
        proc = run_cli(
            "src.train",
            "-m",
            *base,
            "cluster=cpu_pool",
            "cluster.workers=2",
            "seed=0,1,2,3",
            "experiment_name=pool",
            f"paths.mlflow_db={db}",
            f"hydra.sweep.dir={tmp_path / f'round{round_}' / 'multirun'}",
            f"paths.reports_dir={tmp_path / 'reports'}",
        )
        assert proc.returncode == 0, f"round {round_}: {proc.stderr[-3000:]}"
        assert "database is locked" not in proc.stdout + proc.stderr

        client = MlflowClient(f"sqlite:///{db}")
        exp = client.get_experiment_by_name("pool")
        runs = [
            r
            for r in client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)
            if r.data.tags.get(SWEEP_TAG) != "true"
        ]
        assert sorted(r.info.run_name for r in runs) == [f"torch_layernorm-s{s}" for s in range(4)]
        assert {r.info.status for r in runs} == {"FINISHED"}, f"round {round_}"

        slots = [m.groups() for m in SLOT_LINE.finditer(proc.stdout)]
        assert sorted(int(job) for job, *_ in slots) == [0, 1, 2, 3]
        slot_of_pid = {pid: slot for _, slot, pid, _ in slots}
        assert all(slot_of_pid[pid] == slot for _, slot, pid, _ in slots)  # a worker keeps its slot
        assert set(slot_of_pid.values()) <= {"0", "1"}
        cores_of_slot = {slot: cores for _, slot, _, cores in slots}
        if len(cores_of_slot) == 2:  # both workers ran jobs: they were given different cores
            assert cores_of_slot["0"] != cores_of_slot["1"]


def test_core_share() -> None:
    assert core_share([0, 1], 2, 0) == [0] and core_share([0, 1], 2, 1) == [1]
    assert core_share(list(range(8)), 2, 1) == [4, 5, 6, 7]
    assert core_share(list(range(8)), 3, 2) == [5, 6, 7]
    assert core_share([0, 1], 4, 3) == [1]  # more workers than cores: they share


@pytest.mark.parametrize("option", ["cpu_pool", "gpu_pool"])
def test_pool_jobs_are_single_process(option: str) -> None:
    cfg = compose([f"cluster={option}"])
    assert cfg.cluster.devices == 1 and cfg.cluster.num_nodes == 1
    validate(cfg)
    with pytest.raises(ConfigError, match="cluster.devices"):
        validate(compose([f"cluster={option}", "cluster.devices=2"]))
    with pytest.raises(ConfigError, match="cluster.workers"):
        validate(compose([f"cluster={option}", "cluster.workers=0"]))


@pytest.mark.slow
def test_multi_device_pool_sweep_is_refused(tiny_overrides: list[str], store: dict[str, str]) -> None:
    proc = run_cli(
        "src.train", "-m", *tiny_overrides, "cluster=cpu_pool", "cluster.devices=2", "seed=0,1", "experiment_name=refused"
    )
    assert proc.returncode != 0
    assert "cluster.devices" in proc.stderr, proc.stderr[-2000:]
    assert " ok | train " not in proc.stdout  # nothing trained
    if Path(store["db"]).exists():
        client = MlflowClient(store["uri"])
        assert not client.search_runs([e.experiment_id for e in client.search_experiments()])


@pytest.mark.slow
def test_a_killed_pool_worker_is_one_line_naming_the_lost_job(
    migrated_store: dict[str, str], tiny_overrides: list[str], tmp_path: Path
) -> None:
    """SIGKILL of one cpu_pool worker ended the sweep in 69 lines of joblib's
    TerminatedWorkerError, naming neither the job nor how to go on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from helpers import REPO, cli_env

    args = [*tiny_overrides, "cluster=cpu_pool", "cluster.workers=2", "seed=0,1", "optim.max_steps=400", "experiment_name=pool_kill"]
    proc = subprocess.Popen([sys.executable, "-m", "src.train", "-m", *args], cwd=REPO, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the first job to start in a worker: kill that worker
            found = SLOT_LINE.search(line)
            if found:
                break
        assert found, "no job started"
        job, _, pid, _ = found.groups()
        time.sleep(1)  # the launcher watches a worker from its job's first second (FirstDeath polls its folder)
        os.kill(int(pid), signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    errors = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 1, err[-3000:]
    assert "TerminatedWorkerError" not in out + err and "Traceback" not in err, err[-3000:]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"error: lost job {job} (torch_layernorm-s{job}, pid {pid}): its pool worker was killed (exit code SIGKILL(-9))"), errors
    assert "re-run the same command" in errors[0]
