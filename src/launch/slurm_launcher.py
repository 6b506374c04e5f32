"""submitit's SLURM launcher (hydra-submitit-launcher) that submits only the jobs left to do and
watches each until it has a result, or SLURM says it ended without one.

Without SLURM accounting (`sacct`) submitit cannot tell a job that ended without a result from one
still pending, and waits for ever; `squeue` can, for as long as SLURM lists the job (MinJobAge).
Hydra instantiates launchers only from `hydra_plugins`: the class Hydra sees is the subclass in
hydra_plugins/normsweep_launchers/slurm.py (cluster=slurm sets it).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

from src.core.paths import ConfigError
from src.launch.done_jobs import in_order, lost, split_done

# squeue's states of a job that will still produce a result (it may be requeued meanwhile).
SLURM_ALIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "PREEMPTED"})  # fmt: skip
SQUEUE_EVERY_S = 5.0  # how often a job without a result is looked up in squeue
NO_RESULT_GRACE_S = 10.0  # a result file may lag the job's end on a shared file system



def squeue_state(job_id: str) -> str | None:
    """The job's state as squeue lists it; None once SLURM no longer lists it (or squeue fails)."""
    try:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    states = out.stdout.split()
    return states[0] if out.returncode == 0 and states else None


@contextlib.contextmanager
def sbatch_stderr() -> Iterator[Callable[[], str]]:
    """What sbatch writes to stderr while submitit submits (submitit leaves the child's stderr on
    ours): held back, so that a refusal is the one `config error:` line that quotes it; replayed when
    the submission goes through (sbatch's warnings are the user's to read)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        failed = False

        def told() -> str:
            held.seek(0)
            return held.read().decode(errors="replace")

        try:
            yield told
        except BaseException:
            failed = True
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed and (text := told()):
                sys.stderr.write(text)
                sys.stderr.flush()


def sbatch_reason(text: str) -> str:
    """The line of sbatch's output that says why: its `fatal:` line, else its last `error:` line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for mark in ("fatal", "error"):
        said = [line for line in lines if mark in line.lower()]
        if said:
            return said[-1]
    return lines[-1] if lines else "no reason given"


def sbatch_field(reason: str) -> str:
    """The launcher field an sbatch refusal is most likely about."""
    text = reason.lower()
    for words, name in ((("account",), "account"), (("partition",), "partition"),
                        (("gres", "generic resource", "gpu"), "gpus_per_node"), (("qos",), "qos"), (("time limit",), "timeout_min"),
                        (("memory",), "mem_gb"), (("cpu",), "cpus_per_task")):  # fmt: skip
        if any(w in text for w in words):
            return f"hydra.launcher.{name}"
    return "hydra.launcher"


class SlurmSweepLauncher(SlurmLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        pending, returns = split_done(self, job_overrides, initial_job_idx)
        if pending:
            jobs = self._submit(pending)
            for (num, overrides), job in zip(pending, jobs, strict=True):
                returns[num] = self._result(job, num, overrides)
        return in_order(initial_job_idx, len(job_overrides), returns)

    def _executor(self) -> Any:
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        executor = submitit.AutoExecutor(cluster="slurm", folder=folder, slurm_max_num_timeout=params.pop("max_num_timeout", 0))
        shared = set(OmegaConf.structured(BaseQueueConf).keys())  # submitit's names, without the slurm_ prefix
        executor.update_parameters(**{k if k in shared else f"slurm_{k}": v for k, v in params.items()})
        return executor

    def _submit(self, pending: list[tuple[int, list[str]]]) -> list[Any]:
        assert self.config is not None
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        for num, overrides in pending:
            print(f"[normsweep] submitting #{num}: {' '.join(filter_overrides(overrides))}", flush=True)
        state = Singleton.get_state()
        params = [(o, "hydra.sweep.dir", num, f"job_id_for_{num}", state) for num, o in pending]
        with sbatch_stderr() as told:
            try:
                return self._executor().map_array(self, *zip(*params, strict=True))
            except Exception as err:  # sbatch refused the job (submitit's FailedJobError, or sbatch missing)
                reason = sbatch_reason(f"{err}\n{told()}")
                unreached = any(s in reason.lower() for s in ("configuration source", "configuration file", "unable to contact slurm controller"))
                hint = "; this machine reaches no SLURM controller: submit from the cluster's login node (or set SLURM_CONF)" if unreached else ""
                raise ConfigError(f"{sbatch_field(reason)}: sbatch refused the job: {reason}{hint}; nothing was submitted") from None

    def _result(self, job: Any, num: int, overrides: list[str]) -> JobReturn:
        """The job's result once every task has one; a failed return, in one line, if SLURM ended the
        job without one (cancelled, killed, out of memory, a node lost)."""
        from submitit.core.utils import UncompletedJobError

        looked, gone_since = 0.0, None
        while True:
            if job.done():
                try:
                    return job.results()[0]
                except UncompletedJobError:
                    state = job.state
                    break
            now = time.monotonic()
            if now - looked >= SQUEUE_EVERY_S:
                looked = now
                state = squeue_state(job.job_id)
                if state in SLURM_ALIVE:
                    gone_since = None
                elif gone_since is None:
                    gone_since = now
                elif now - gone_since > NO_RESULT_GRACE_S:
                    break
            time.sleep(1.0)
        what = f"ended ({state})" if state else "is no longer listed by SLURM"
        return lost(
            overrides,
            f"job #{num}: SLURM job {job.job_id} {what} without a result (its log: "
            f"{job.paths.stderr}); re-run the same command to continue it from its checkpoint",
        )
