"""Parallel jobs on one machine: each worker process of a multirun gets a slot, and the slot its resources.

`cluster=cpu_pool` and `cluster=gpu_pool` run `cluster.workers` jobs of a multirun at once through
Hydra's joblib launcher. Its workers are separate processes (loky) that each run several jobs in
turn, and which job lands in which worker is decided at run time: with 4 jobs on 2 workers, job 2
may start while job 0 is still running. So a slot belongs to the worker process, not to the job
number: the first job in a worker claims a free slot k (an exclusive lock file in the sweep folder,
released when the process exits) and pins the process, for its whole life, to

- CPU: the k-th of `workers` equal shares of the cores (affinity of every thread, and as many torch
  threads), so 2 jobs on 2 cores never share a core;
- GPU: the k-th visible GPU, or GPU k mod their number when there are more workers than GPUs
  (CUDA_VISIBLE_DEVICES, set before this process first touches CUDA, which is also why the slot
  cannot change between the jobs of one worker).

Nothing here imports torch at module level: Hydra instantiates the callback in the launching process.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from filelock import FileLock
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from src.core.atomic_io import try_hold
from src.core.terminal import say

_claimed: tuple[int, FileLock, str] | None = None  # (slot, its lock, what it pinned): held until exit
RUNNING_DIR = "running"  # under the slots folder: job-<num>.json while a worker runs that job


def core_share(cores: list[int], workers: int, slot: int) -> list[int]:
    """The slot's contiguous share of `cores`; with more workers than cores, workers share a core."""
    if workers >= len(cores):
        return [cores[slot % len(cores)]]
    start, stop = slot * len(cores) // workers, (slot + 1) * len(cores) // workers
    return cores[start:stop]


def claim_slot(slots_dir: Path, workers: int, first_choice: int = 0) -> tuple[int, FileLock]:
    """A free slot in 0..workers-1 and the lock that holds it (keep it: released when the process exits)."""
    slots_dir.mkdir(parents=True, exist_ok=True)
    while True:  # a worker replaced by loky may briefly wait for its predecessor to exit
        for i in range(workers):
            slot = (first_choice + i) % workers
            lock = try_hold(slots_dir / f"slot-{slot}.lock")
            if lock is not None:
                return slot, lock
        time.sleep(0.1)


def pin_cores(cores: list[int]) -> None:
    """Every thread of this process, and any it starts later, runs on `cores`; torch uses that many."""
    import torch

    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cores)
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))


class PoolSlot(Callback):
    """Give each worker process of a pool its slot, at its first job.

    Hydra turns an exception in a callback into a warning, so nothing here refuses a config:
    `src.training.run_spec.validate` does that in the job (cluster.devices and num_nodes must be 1).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.cluster.accelerator in ("gpu", "cuda") and "CUDA_VISIBLE_DEVICES" not in os.environ:
            # Counted in the launching process, which never trains: a worker must not touch CUDA
            # before its own CUDA_VISIBLE_DEVICES is set. The workers inherit the list.
            import torch

            if torch.cuda.device_count():
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(torch.cuda.device_count())))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            return  # a single run keeps the whole machine
        global _claimed
        cluster = config.cluster
        job_num = int(config.hydra.job.num)
        if _claimed is None:  # this worker's first job: claim a slot and pin the process once
            slot, lock = claim_slot(Path(config.hydra.sweep.dir) / ".slots", cluster.workers, first_choice=job_num)
            if cluster.accelerator in ("gpu", "cuda"):
                gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
                where = "no GPU visible"
                if gpus:
                    # More workers than GPUs: worker k shares GPU k mod len(gpus) with another.
                    os.environ["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
                    where = f"GPU {gpus[slot % len(gpus)]}" + (" (shared)" if cluster.workers > len(gpus) else "")
            else:
                cores = core_share(sorted(os.sched_getaffinity(0)), cluster.workers, slot)
                pin_cores(cores)
                where = f"core(s) {','.join(map(str, cores))}"
            _claimed = (slot, lock, where)
        slot, _, where = _claimed
        mark_running(Path(config.hydra.sweep.dir) / ".slots", job_num, str(config.get("run_name", "?")))
        say(f"[normsweep] job {job_num} in worker slot {slot} (pid {os.getpid()}): {where}")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            (Path(config.hydra.sweep.dir) / ".slots" / RUNNING_DIR / f"job-{int(config.hydra.job.num)}.json").unlink(missing_ok=True)


# --- a worker killed (SIGKILL, the OOM killer) ------------------------------------------------
#
# joblib then raises TerminatedWorkerError in the launching process (69 lines, naming no job) and
# stops every other worker of the pool with it. Each worker marks the job it runs, so the launcher
# (src/launch/pool_launcher.py) can name in one line the jobs that were lost.


def mark_running(slots_dir: Path, job_num: int, run_name: str) -> None:
    """Say, in the sweep folder, that this process runs job `job_num` (removed when the job ends)."""
    folder = slots_dir / RUNNING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"job-{job_num}.json").write_text(json.dumps({"num": job_num, "run_name": run_name, "pid": os.getpid()}))
