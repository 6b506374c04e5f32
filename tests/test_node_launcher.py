"""One node, several processes per job, one command (`-m ... cluster=gpu_node`): each job's ranks are
started by torchrun (src/launch/node_launcher.py), here two gloo processes on the CPU. A SIGTERM mid-job
keeps the work, and the re-run continues the same run and starts only what is left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
from helpers import REPO, cli_env, training_runs, unwrapped
from mlflow.tracking import MlflowClient

STEPS = 24


@pytest.mark.slow
def test_a_node_sweep_runs_each_job_on_its_ranks_and_a_sigterm_loses_nothing(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    experiment = "node_sweep"
    args = [
        sys.executable, "-m", "src.train", "-m", *tiny_overrides, f"experiment_name={experiment}",
        "norm=hand_layernorm,torch_layernorm", "cluster=gpu_node", "cluster.accelerator=cpu", "cluster.devices=2",
        f"optim.max_steps={STEPS}", "val_every_n_steps=12", "checkpoint.enabled=true", "checkpoint.every_n_steps=5",
    ]  # fmt: skip
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(args, cwd=REPO, env=cli_env(), stdout=out, stderr=subprocess.STDOUT, text=True)
        _await_checkpoint(proc, tmp_path, "*/hand_layernorm-*/last.ckpt", log, 240)
        proc.send_signal(signal.SIGTERM)  # to the sweep's process: torchrun passes it to both ranks
        code = proc.wait(timeout=120)
    first = log.read_text()
    assert code == 0, first[-3000:]
    assert "sweep stopped by SIGTERM in job #0; re-run the same command to continue" in first
    (stopped,) = training_runs(MlflowClient(store["uri"]), experiment)
    assert stopped.data.tags["outcome"] == "preempted" and stopped.data.tags["env.world_size"] == "2"

    again = subprocess.run(args, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=400)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    assert "preempted; resuming from its checkpoint" in said
    runs = {r.info.run_name: r for r in training_runs(MlflowClient(store["uri"]), experiment)}
    assert sorted(runs) == ["hand_layernorm-s0", "torch_layernorm-s0"]  # one run per job
    assert runs["hand_layernorm-s0"].info.run_id == stopped.info.run_id  # the same run, continued
    for run in runs.values():
        assert run.info.status == "FINISHED" and run.data.metrics["steps_done"] == STEPS
        assert run.data.tags["env.world_size"] == "2"
    assert said.count("| test loss") == 2, "one summary line per job, not one per rank"

    third = subprocess.run(args, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=200)
    assert "2 of 2 jobs already finished: not started again; starting 0" in third.stdout + third.stderr
    assert "on 2 processes" not in third.stdout


def _rank_pid(sweep_pid: int, rank: int) -> int | None:
    """The pid of the sweep's worker of `rank` (torchrun's child, RANK in its environment)."""
    import psutil

    for p in psutil.Process(sweep_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "src.launch.node_job" in p.cmdline() and p.environ().get("RANK") == str(rank):
                return p.pid
    return None


def _training_on_two_ranks(overrides: list[str], experiment: str, tmp_path: Path, out: IO[str], log: Path) -> subprocess.Popen[str]:
    """A long one-job node sweep on two CPU ranks, returned once both ranks are inside the training loop
    (its first checkpoint written), its output going to `out` (the file `log`)."""
    args = [
        sys.executable, "-m", "src.train", "-m", *overrides, f"experiment_name={experiment}",
        "cluster=gpu_node", "cluster.accelerator=cpu", "cluster.devices=2", "optim.max_steps=2000",
        "val_every_n_steps=1000", "checkpoint.enabled=true", "checkpoint.every_n_steps=5",
    ]  # fmt: skip
    proc = subprocess.Popen(args, cwd=REPO, env=cli_env(), stdout=out, stderr=subprocess.STDOUT, text=True)
    _await_checkpoint(proc, tmp_path, "*/*/last.ckpt", log, 300)
    return proc


def _await_checkpoint(proc: subprocess.Popen[str], tmp_path: Path, pattern: str, log: Path, timeout: float) -> None:
    """Until a checkpoint matching `pattern` is under tmp_path/checkpoints (the job is inside its fit);
    the sweep's output (`log`) if it ends first."""
    deadline = time.monotonic() + timeout
    while not list((tmp_path / "checkpoints").glob(pattern)):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no checkpoint {pattern} within {timeout:.0f} s"
        time.sleep(0.3)


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_is_one_line_naming_it(tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    """`kill -9` of rank 1 mid-job printed rank 0's gloo error (`Connection closed by peer ...`) and
    torchrun's `ChildFailedError` traceback and table: 47 lines, none saying which rank died and why."""
    experiment = "node_rank_killed"
    log = tmp_path / "sweep.log"
    with open(log, "w") as out:
        proc = _training_on_two_ranks(tiny_overrides, experiment, tmp_path, out, log)
        victim = _rank_pid(proc.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        code = proc.wait(timeout=300)
    said = log.read_text()
    assert code == 1, said[-3000:]
    for noise in ("Traceback", "ChildFailedError", "gloo", "Connection closed", "Connection reset", "Error executing job"):
        assert noise not in said, said[-3000:]
    line = (f"error: job 0 (torch_layernorm-s0): rank 1 (pid {victim}) was killed by SIGKILL; torchrun stopped the job's "
            "other ranks: re-run the same command to go on (finished jobs are skipped, this one resumes from its "
            "checkpoint or starts again)")  # fmt: skip
    lines = unwrapped(said).strip().splitlines()
    assert lines[-1] == line and lines.count(f"[normsweep] {line}") == 1, said[-3000:]  # said when it happens, and at the end
    client = MlflowClient(store["uri"])
    (run,) = training_runs(client, experiment)
    # Rank 0 closed it FAILED (the lost peer as its error), or torchrun stopped rank 0 first: RUNNING, lost.
    assert run.info.status in ("FAILED", "RUNNING"), run.info.status
    (parent,) = [r for r in client.search_runs([run.info.experiment_id]) if r.info.run_id != run.info.run_id]
    assert parent.info.status == "FAILED" and parent.data.tags["sweep.end_reason"] == line.removeprefix("error: ")


@pytest.mark.slow
def test_a_sigkilled_node_sweep_takes_torchrun_and_its_ranks_with_it(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    """`kill -9` of the sweep left torchrun (re-parented to PID 1) and its ranks training: they
    finished the job ~30 s later and recorded it FINISHED while the sweep run stayed RUNNING."""
    import psutil

    experiment = "node_sweep_killed"
    log = tmp_path / "sweep.log"
    with open(log, "w") as out:
        proc = _training_on_two_ranks(tiny_overrides, experiment, tmp_path, out, log)
        left = psutil.Process(proc.pid).children(recursive=True)  # torchrun and the two ranks
        assert len([p for p in left if "src.launch.node_job" in p.cmdline()]) >= 3  # torchrun names it too
        proc.kill()
        proc.wait()
    started = time.monotonic()
    gone, alive = psutil.wait_procs(left, timeout=90)
    print(f"all {len(left)} processes gone {time.monotonic() - started:.1f} s after the kill")
    assert not alive, [p.cmdline() for p in alive]
    (run,) = training_runs(MlflowClient(store["uri"]), experiment)
    assert run.info.status != "FINISHED" and int(run.data.metrics.get("steps_done", 0)) < 2000  # it did not train on


# torchrun's report, as it printed it for the probe above (torch 2.13): the rank a signal killed is its root cause.
TORCHRUN_REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
src.launch.node_job FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-05_00:51:33
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 8980)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 8980
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_00:51:32
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 8981)  ({name})
  error_file: <N/A>
  traceback : {traceback}
======================================================
"""


def test_torchruns_root_cause_names_the_killed_rank_and_only_a_signal_counts() -> None:
    from src.launch.torchrun_output import KilledRank

    killed = TORCHRUN_REPORT.format(code=-9, name="SIGKILL", traceback="Signal 9 (SIGKILL) received by PID 8981")
    assert KilledRank.find(killed) == KilledRank(rank=1, pid=8981, signal="SIGKILL")
    # A rank that raised (exit code 1) is the job's own failure: its lines are printed as torchrun wrote them.
    raised = TORCHRUN_REPORT.format(code=1, name="", traceback="To enable traceback see: ...")
    assert KilledRank.find(raised) is None
    assert KilledRank.find("no report at all") is None
