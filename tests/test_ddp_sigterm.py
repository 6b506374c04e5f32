"""SIGTERM to a two-rank DDP run on the CPU (gloo, one rank per core): every rank stops at the same step, rank 0
writes one checkpoint, the run ends `preempted`, and every process exits (before: all hung)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, cli_env
from mlflow.tracking import MlflowClient

GRACE_S = 180  # generous on a loaded 2-core machine; the defect was an indefinite hang


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_sigterm_stops_every_rank_and_checkpoints_once(tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = [
        *[o for o in tiny_overrides if not o.startswith(("optim.max_steps=", "optim.micro_batch_size="))],
        "optim.micro_batch_size=1", "optim.max_steps=500", "val_every_n_steps=1000",
        "cluster.accelerator=cpu", "cluster.devices=2", "cluster.strategy=ddp",
        "checkpoint.enabled=true", "checkpoint.every_n_steps=1000", f"checkpoint.dir={ckpt}", "experiment_name=ddp_sigterm",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.train", *args], cwd=REPO, env=cli_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    client = MlflowClient(store["uri"])
    try:
        deadline = time.time() + 600
        while True:  # until rank 0 has logged step 2: every rank is inside the training loop
            assert proc.poll() is None and time.time() < deadline, "the run ended or never started training"
            exp = client.get_experiment_by_name("ddp_sigterm") if Path(store["db"]).exists() else None
            runs = client.search_runs([exp.experiment_id]) if exp else []
            if runs and len(client.get_metric_history(runs[0].info.run_id, "train/train_loss")) >= 2:
                break
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)  # as `kill` on the job, SLURM or a spot reclaim sends it
        out, _ = proc.communicate(timeout=GRACE_S)
        deadline = time.time() + GRACE_S
        while _group_alive(proc.pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid), "a rank is still running"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    assert out.count("stopped by SIGTERM") == 1  # rank 0 speaks for the run
    (run,) = client.search_runs([client.get_experiment_by_name("ddp_sigterm").experiment_id])
    assert run.info.status == "KILLED" and run.data.tags["outcome"] == "preempted"
    assert [p.name for p in ckpt.iterdir()] == ["last.ckpt"]  # one file, no partial write left
    saved = torch.load(ckpt / "last.ckpt", weights_only=True, mmap=True)["global_step"]
    logged = max(m.step for m in client.get_metric_history(run.info.run_id, "train/train_loss"))
    assert saved == logged  # the state of the last step every rank finished
