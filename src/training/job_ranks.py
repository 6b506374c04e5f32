"""One decision per job, however many processes the job has.

Every process of a multi-process job runs `train()`: SLURM starts one task per device, torchrun one
worker per device, each with the same config. What must happen once per job — deciding skip / resume
/ new, taking the sweep's claim on the config, settling and opening the MLflow run — is rank 0's
alone. Left to every rank, the ranks race for the claim and whichever wins decides: measured on a
real SLURM, rank 0 skipped ("opened by … pid <rank 1>") while rank 1 waited for it in DDP until
killed.

These processes exist before the Trainer does, so their process group is formed here, from the same
cluster environment Lightning reads (`SLURMEnvironment`, `TorchElasticEnvironment`); Lightning's DDP
strategy finds it initialized and uses it. Rank 0 decides and broadcasts the plan; a refusal on rank
0 reaches the others as `PeerRefused`, so no rank waits for a collective that will never come.

Processes that Lightning itself starts (a single run with `strategy=ddp`) do not exist yet when the
plan is made: there, rank 0 plans alone and its children, started by re-running the command, decide
from the same checkpoint file (src/training/resume.py, `plan_single_run`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch.distributed as dist
from lightning.fabric.plugins.environments import (
    ClusterEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)

from src.training.resume import RunPlan

# Rank 0 may wait this long for the store or another copy's claim before it broadcasts its plan.
DECISION_TIMEOUT = datetime.timedelta(minutes=30)


class PeerRefused(Exception):
    """Rank 0 refused the job before it trained; this rank stops too (rank 0 says why)."""


def launched_environment(world_size: int) -> ClusterEnvironment | None:
    """The environment of a job whose `world_size` processes were started by SLURM or torchrun."""
    if world_size < 2:
        return None
    if SLURMEnvironment.detect() and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return SLURMEnvironment(auto_requeue=False)  # the requeue path is ours (src/training/preemption.py)
    if TorchElasticEnvironment.detect() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return TorchElasticEnvironment()
    return None


def join_process_group(env: ClusterEnvironment, device_type: str) -> None:
    """The job's process group, formed once per process (sequential sweep jobs of one torchrun reuse it)."""
    if dist.is_initialized():
        return
    os.environ["MASTER_ADDR"] = env.main_address
    os.environ["MASTER_PORT"] = str(env.main_port)
    # The plan travels over gloo; on GPUs Lightning's collectives take NCCL for CUDA tensors.
    backend = "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(
        backend, rank=env.global_rank(), world_size=env.world_size(), timeout=DECISION_TIMEOUT
    )


def _broadcast(message: Any) -> Any:
    box = [message]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def decided_once(decide: Callable[[], RunPlan], world_size: int, device_type: str) -> RunPlan:
    """`decide()` on rank 0 alone, its plan shared with every rank of the job."""
    env = launched_environment(world_size)
    if env is None:
        return decide()
    join_process_group(env, device_type)
    if dist.get_rank() != 0:
        kind, plan = _broadcast(None)
        if kind == "refused":
            raise PeerRefused(plan)
        return plan
    try:
        plan = decide()
    except BaseException as err:
        _broadcast(("refused", f"{type(err).__name__}: {err}"))
        raise
    # The claim and the message are rank 0's: the others follow the decision, hold nothing, say nothing.
    _broadcast(("plan", replace(plan, claim=None, message="")))
    return plan
