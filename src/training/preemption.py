"""SIGTERM — and under SLURM its warning signals — honoured by every rank at the same step.

Lightning's SIGTERM handler broadcasts from inside the signal handler and lets each rank raise at
the end of whichever batch it is in. With several DDP ranks (all signalled by `kill` on the process
group, or by rank 0 forwarding the signal) the ranks stop at different steps, their collectives no
longer pair up, and every rank hangs (measured: three gloo ranks on the CPU still hung 60 s after
SIGTERM, with no checkpoint and the run left RUNNING). Here the handler only records the request;
before each optimizer step the ranks agree (one all-reduce of a flag) and all stop at that same step,
so the checkpoint save that follows (`SaveOnSigterm`, written by rank 0) is a collective every
rank joins.

Under SLURM the same path answers every signal a job is sent before it is stopped: SIGTERM
(`scontrol requeue`, `scancel`, pre-emption), SIGUSR1 (Lightning's recipe, `--signal=USR1@90`, and
what admins send) and SIGUSR2 (submitit's warning before the time limit). Lightning's own answer to
SIGUSR1 (auto-requeue) is off (src/training/run_life.py): it wrote `hpc_ckpt_1.ckpt` into the
working folder, which the next `fit`/`test` without `ckpt_path` loaded — a run FINISHED "ok" with
the test loss of step-21 weights (10.4908 against 7.013996). submitit's handler for SIGUSR2 exits the
job without a checkpoint and requeues it only `max_num_timeout` times (0 by default): a job that
reached its time limit lost its training. Here the job checkpoints where its run's checkpoints live,
is recorded as pre-empted, and asks SLURM to requeue it (`requeue_this_job`); it comes back to the
same MLflow run at the same step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from src.core.cli import CANCELLED_FILE_ENV
from src.core.interrupts import signal_name


def slurm_job_id() -> str | None:
    """The SLURM job this process runs in, or None. An array task is named `<array>_<task>`: its own
    numeric id can equal the array's (the last task of array 4 is job 4), and `scontrol requeue 4`
    requeues every task of the array — measured here: one signalled job restarted all five."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


# SLURM's warnings before it stops a job; outside SLURM they keep their usual meaning.
SLURM_WARNINGS = (signal.SIGUSR1, signal.SIGUSR2)


def requeue_this_job() -> str:
    """Ask SLURM to requeue this job (it starts again from the same submission); what happened, in words.

    A job SLURM is already requeueing (`scontrol requeue` sent the SIGTERM) or cancelling refuses a
    second request; that is not an error: the re-run of the sweep continues it either way."""
    job = slurm_job_id()
    if job is None:
        return "not a SLURM job"
    cancelled = os.environ.get(CANCELLED_FILE_ENV)
    if cancelled and os.path.exists(cancelled):
        return f"SLURM job {job} not requeued: its sweep was stopped and cancelled it; re-run the same command to resume"
    try:
        done = run_past_sigterm(["scontrol", "requeue", job], timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"SLURM job {job} not requeued ({err}); re-run the same command to resume"
    if done.returncode == 0 or "pending execution" in done.stderr:  # pending: SLURM requeued it already
        return f"SLURM job {job} requeued"
    reason = (done.stderr or done.stdout).strip().splitlines()
    said = reason[-1] if reason else _exit_in_words(done.returncode)
    return f"SLURM job {job} not requeued ({said}); re-run the same command to resume"


def run_past_sigterm(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a command that ignores SIGTERM. A requeue stops the job it requeues with SIGTERM, sent to
    every process of the job — `scontrol requeue` itself included, once the controller has accepted
    the request but sometimes before scontrol has exited: it then died of the very requeue it asked
    for (measured here: "not requeued (-15)" of a job that was requeued and came back). An ignored
    signal stays ignored across exec, so the shell's `trap` reaches scontrol; SLURM's SIGKILL after
    KillWait still ends it."""
    return subprocess.run(["sh", "-c", 'trap "" TERM; exec "$@"', "sh", *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _exit_in_words(code: int) -> str:
    return f"scontrol exited {code}" if code >= 0 else f"scontrol stopped by {signal_name(-code)}"


class AgreedSigterm(L.Callback):
    def __init__(self) -> None:
        self.requested = False
        self.signal_name: str | None = None  # the signal that stopped the run, once one did
        # The handler in place before the run (e.g. submitit's, which only logs a SIGTERM): still told.
        self._outer = signal.getsignal(signal.SIGTERM)
        self._launcher: Any = None
        if slurm_job_id() is not None and threading.current_thread() is threading.main_thread():
            # From now on (data preparation included), not only during the fit: submitit's SIGUSR2
            # handler would end the job without a checkpoint; Lightning's SIGUSR1 one is off.
            for sig in SLURM_WARNINGS:
                signal.signal(sig, self._on_warning)

    def _record(self, signum: int) -> None:
        if not self.requested:
            self.signal_name = signal.Signals(signum).name
        self.requested = True

    def _on_warning(self, signum: int, frame: FrameType | None) -> None:
        self._record(signum)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested and self._launcher is not None:
            self._launcher.kill(signum)  # rank 0 of Lightning's launcher: the ranks it started stop too
        self._record(signum)
        if callable(self._outer):
            self._outer(signum, frame)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Replaces Lightning's handler for the rest of the fit; Lightning restores the previous one
        # at teardown. A signal that came before the fit (during data preparation) still counts.
        self._launcher = trainer.strategy.launcher
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        # Checked before an optimizer step's first micro-batch: the step before it is complete,
        # logged and in the checkpoint; no accumulated gradient is thrown away.
        if batch_idx % trainer.accumulate_grad_batches:
            return
        stop = self.requested
        if trainer.world_size > 1:  # every rank calls this at the same batch: a collective is safe
            flag = torch.tensor(float(stop), device=trainer.strategy.root_device)
            stop = float(trainer.strategy.reduce(flag, reduce_op="sum")) > 0
        if stop:
            raise SIGTERMException
