"""submitit's SLURM launcher (hydra-submitit-launcher) that submits only the jobs left to do and
watches each until it has a result, or SLURM says it ended without one.

Without SLURM accounting (`sacct`) submitit cannot tell a job that ended without a result from one
still pending, and waits for ever; `scontrol` can, for as long as SLURM lists the job (MinJobAge).
It also counts a job's requeues: each one is a line on the sweep's console (a pre-emption and a
plain `scancel` both send SIGTERM, which the job answers by checkpointing and requeueing itself),
where submitit printed only its sacct warnings, now held back. A controller that stops answering
(`scontrol ping`) is waited for as long as the cluster says its backup would take to answer
instead; then the sweep ends in one line that says so (`controller_gone_line`): each `scontrol show
job` against a dead controller took 18 s and ended in "no longer listed", which was not the reason. A sweep stopped by Ctrl+C or SIGTERM
cancels the jobs it submitted, after writing the file that tells them not to requeue themselves.
Hydra instantiates launchers only from `hydra_plugins`: the class Hydra sees is the subclass in
hydra_plugins/normsweep_launchers/slurm.py (cluster=slurm sets it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
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

from src.core.cli import CANCELLED_FILE_ENV
from src.core.paths import ConfigError
from src.core.terminal import say
from src.launch.done_jobs import in_order, lost, split_done
from src.launch.sweep_end import job_failed, without_hydra_line

# squeue's states of a job that will still produce a result (it may be requeued meanwhile).
SLURM_ALIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "PREEMPTED"})  # fmt: skip
SQUEUE_EVERY_S = 5.0  # how often a job without a result is looked up (scontrol)
NO_RESULT_GRACE_S = 10.0  # a result file may lag the job's end on a shared file system
SCONTROL_TIMEOUT_S = 30.0
DEFAULT_CONTROLLER_WAIT_S = 130.0  # SLURM's defaults: SlurmctldTimeout 120 s + MessageTimeout 10 s



def job_view(job_id: str) -> tuple[str, int] | None:
    """(the job's state, how often SLURM has requeued it), as `scontrol` shows it; None once SLURM no
    longer knows the job (MinJobAge) or scontrol fails."""
    try:
        out = subprocess.run(["scontrol", "--oneliner", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    state, restarts = re.search(r"\bJobState=(\S+)", out.stdout), re.search(r"\bRestarts=(\d+)", out.stdout)
    if out.returncode != 0 or state is None:
        return None
    return state.group(1), int(restarts.group(1)) if restarts else 0


def controller_down() -> str | None:
    """None while a SLURM controller (primary or backup) answers, or where `scontrol` cannot ask (not
    installed here: the jobs' own states say the rest); else what `scontrol ping` said."""
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"scontrol ping: no answer in {SCONTROL_TIMEOUT_S:.0f} s"
    except OSError:
        return None
    said = [line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip() and "*" not in line]
    if out.returncode == 0 or any(line.endswith(" is UP") for line in said):
        return None
    return "; ".join(said) or f"scontrol ping exited {out.returncode}"


def controller_wait_s() -> float:
    """How long a controller may be silent before the sweep stops waiting for it: the cluster's
    SlurmctldTimeout (after which its backup controller, if it has one, takes over) and one
    MessageTimeout to reach it, as `scontrol show config` gives them; SLURM's defaults otherwise."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S).stdout
    except (OSError, subprocess.TimeoutExpired):
        return DEFAULT_CONTROLLER_WAIT_S
    found = {key: float(value) for key, value in re.findall(r"^(SlurmctldTimeout|MessageTimeout)\s*=\s*(\d+)", out, re.M)}
    if len(found) != 2:
        return DEFAULT_CONTROLLER_WAIT_S
    return found["SlurmctldTimeout"] + found["MessageTimeout"]


def controller_gone_line(nums: list[int], arrays: list[str], reason: str, waited_s: float) -> str:
    """The sweep's one line when the SLURM controller stopped answering with jobs not done."""
    jobs = ", ".join(f"#{n}" for n in nums)
    many = len(nums) > 1
    return (
        f"error: the SLURM controller stopped answering ({reason}) for {waited_s:.0f} s with job{'s' if many else ''} "
        f"{jobs} not done; the sweep stopped waiting. {'Their runs keep what they' if many else 'Its run keeps what it'} "
        "checkpointed. Start SLURM again "
        f"(python -m src.launch.local_slurm, on this machine's own cluster; elsewhere the cluster's admins), then "
        f"`scancel {' '.join(arrays)}` (SLURM may still hold them) and re-run the same command: finished jobs are "
        "skipped, the others resume from their checkpoints"
    )


def requeued_line(num: int, job_id: str, restarts: int) -> str:
    """What the sweep's console says when SLURM has requeued one of its jobs (the job checkpointed first)."""
    return (
        f"[normsweep] job #{num}: SLURM job {job_id} was stopped by a signal and requeued ({restarts} time"
        f"{'s' if restarts != 1 else ''} so far); pre-emption, a time limit's warning, `scontrol requeue` and a plain "
        f"`scancel` all send one and cannot be told apart: its run was checkpointed and resumes when SLURM starts it "
        f"again. To stop it for good: `scancel {job_id}` while it waits (squeue shows it PENDING), or stop this "
        "sweep (Ctrl+C cancels its jobs)"
    )


class _NoSacctWarnings(logging.Filter):
    """submitit's `Bypassing sacct error ..., status may be inaccurate.`, every few seconds on a cluster
    without accounting: the launcher follows its jobs through scontrol instead, and says what matters
    (a requeue: `requeued_line`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Bypassing sacct error" not in record.getMessage()


@contextlib.contextmanager
def quiet_sacct() -> Iterator[None]:
    said = _NoSacctWarnings()
    logging.getLogger("submitit").addFilter(said)
    try:
        yield
    finally:
        logging.getLogger("submitit").removeFilter(said)


@contextlib.contextmanager
def held_stderr(keep: Callable[[str], bool] = lambda line: True) -> Iterator[Callable[[], str]]:
    """What a child of submitit writes to stderr meanwhile (submitit leaves the child's stderr on ours),
    held back; its lines that `keep` accepts are replayed unless the block raised.

    sbatch's: a refusal is the one `config error:` line that quotes it; its warnings on a submission
    that went through are the user's to read. sacct's: `Slurm accounting storage is disabled` at every
    status check of a cluster without accounting, which the launcher does without."""
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
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not failed and (text := "".join(line for line in told().splitlines(keepends=True) if keep(line))):
                sys.stderr.write(text)
                sys.stderr.flush()


def not_sacct(line: str) -> bool:
    return not line.startswith("sacct:") and "accounting storage is disabled" not in line


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
            assert self.config is not None
            # Named before sbatch copies the environment into the jobs: written only if this sweep is stopped.
            cancelled = Path(str(self.config.hydra.sweep.dir)) / ".submitit" / f"cancelled-{os.getpid()}-{time.time_ns()}"
            os.environ[CANCELLED_FILE_ENV] = str(cancelled)
            jobs = self._submit(pending)
            try:
                with quiet_sacct():
                    returns.update(self._results(pending, jobs))
            except (KeyboardInterrupt, SystemExit):  # Ctrl+C, or SIGTERM (src/launch/sweep_end.py): stopped
                cancel(jobs, cancelled)
                raise
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
            say(f"[normsweep] submitting #{num}: {' '.join(filter_overrides(overrides))}")
        state = Singleton.get_state()
        params = [(o, "hydra.sweep.dir", num, f"job_id_for_{num}", state) for num, o in pending]
        with held_stderr() as told:
            try:
                return self._executor().map_array(self, *zip(*params, strict=True))
            except Exception as err:  # sbatch refused the job (submitit's FailedJobError, or sbatch missing)
                reason = sbatch_reason(f"{err}\n{told()}")
                unreached = any(s in reason.lower() for s in ("configuration source", "configuration file", "unable to contact slurm controller"))
                hint = "; this machine reaches no SLURM controller: submit from the cluster's login node (or set SLURM_CONF)" if unreached else ""
                raise ConfigError(f"{sbatch_field(reason)}: sbatch refused the job: {reason}{hint}; nothing was submitted") from None

    def _results(self, pending: list[tuple[int, list[str]]], jobs: list[Any]) -> dict[int, JobReturn]:
        """Each job's result once every task has one; a failed return, in one line, for a job SLURM ended
        without one (cancelled, killed, out of memory, a node lost); one line each time SLURM requeues one."""
        from submitit.core.utils import UncompletedJobError

        waiting = {num: (job, overrides) for (num, overrides), job in zip(pending, jobs, strict=True)}
        results: dict[int, JobReturn] = {}
        restarts = dict.fromkeys(waiting, 0)
        seen_restarts = dict.fromkeys(waiting, 0)
        gone_since: dict[int, float] = {}
        states: dict[int, str | None] = {}
        looked = 0.0
        silent_since: float | None = None
        wait_s = controller_wait_s()
        while waiting:
            with held_stderr(keep=not_sacct):  # submitit asks sacct first, at every look
                for num, (job, overrides) in list(waiting.items()):
                    if job.done():
                        try:
                            results[num] = job.results()[0]
                        except UncompletedJobError:
                            results[num] = self._lost(job, num, overrides, job.state)
                        del waiting[num]
            now = time.monotonic()
            if waiting and now - looked >= SQUEUE_EVERY_S:
                looked = now
                reason = controller_down()
                if reason is not None:
                    silent_since = now if silent_since is None else silent_since
                    if now - silent_since >= wait_s:
                        results.update(self._controller_gone(waiting, reason, now - silent_since))
                        break
                    continue
                silent_since = None
                for num, (job, overrides) in list(waiting.items()):
                    view = job_view(job.job_id)
                    states[num] = view[0] if view else None
                    # Said once two looks agree: a job requeued as its controller is stopped would not resume.
                    if view is not None and view[1] > restarts[num] and view[1] == seen_restarts[num]:
                        restarts[num] = view[1]
                        say(requeued_line(num, job.job_id, view[1]))
                    if view is not None:
                        seen_restarts[num] = view[1]
                    if states[num] in SLURM_ALIVE:
                        gone_since.pop(num, None)
                    elif now - gone_since.setdefault(num, now) > NO_RESULT_GRACE_S:
                        results[num] = self._lost(job, num, overrides, states[num])
                        del waiting[num]
            time.sleep(1.0)
        return results

    @staticmethod
    def _lost(job: Any, num: int, overrides: list[str], state: str | None) -> JobReturn:
        what = f"ended ({state})" if state else "is no longer listed by SLURM"
        line = (f"job #{num}: SLURM job {job.job_id} {what} without a result (its log: {job.paths.stderr}); "
                "re-run the same command to continue it from its checkpoint")  # fmt: skip
        job_failed(line)  # the sweep run's end reason
        return said_lost(overrides, line)

    @staticmethod
    def _controller_gone(waiting: dict[int, tuple[Any, list[str]]], reason: str, waited_s: float) -> dict[int, JobReturn]:
        """Every job still waited for, failed with the one line that says the controller is gone."""
        arrays = sorted({str(job.job_id).split("_")[0] for job, _ in waiting.values()})
        line = controller_gone_line(sorted(waiting), arrays, reason, waited_s)
        job_failed(line.removeprefix("error: "))  # the sweep run's end reason, once
        return {num: said_lost(overrides, line) for num, (_, overrides) in waiting.items()}


def said_lost(overrides: list[str], line: str) -> JobReturn:
    """A job lost with `line` as its last line (Hydra's own line before it, every override of the job,
    left out)."""
    result = lost(overrides, line)
    without_hydra_line(result)
    return result


def cancel(jobs: list[Any], cancelled: Path) -> None:
    """The sweep was stopped: cancel the SLURM jobs it submitted (pending ones would start later, running
    ones go on with nobody waiting), after writing the file that tells them not to requeue themselves."""
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    with contextlib.suppress(OSError):
        cancelled.parent.mkdir(parents=True, exist_ok=True)
        cancelled.write_text("the sweep was stopped\n")
    try:
        done = subprocess.run(["scancel", *arrays], capture_output=True, text=True, timeout=30)
        said = "" if done.returncode == 0 else f" (scancel: {(done.stderr or done.stdout).strip() or done.returncode})"
    except (OSError, subprocess.TimeoutExpired) as err:
        said = f" (scancel failed: {err}; cancel them yourself: scancel {' '.join(arrays)})"
    say(f"[normsweep] sweep stopped: its SLURM job{'s' if len(arrays) > 1 else ''} {', '.join(arrays)} cancelled{said}; "
          "running jobs checkpoint and stop without requeueing: re-run the same command to resume them")  # fmt: skip
