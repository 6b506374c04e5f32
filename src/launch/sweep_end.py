"""Every exit path of a multirun closes its parent sweep run, once, with the reason.

Hydra calls `on_multirun_end` only when every job returned. A job that raises (after the basic
sweeper's batch), a job refused by its own checks (`SystemExit` with a one-line message), Ctrl+C,
or SIGTERM outside a training step all end the sweep without it, and the parent run would stay
RUNNING. `SweepParent` is armed when the parent run opens and closes it at interpreter exit unless
the normal end closed it first:

    all jobs returned                  -> FINISHED (outcome finished) or FAILED (incomplete: some
                                          job has no result), with the jobs' counts
    a job failed or was refused        -> FAILED, outcome failed, the job's one-line error as reason
    SIGTERM (pre-emption, scancel)     -> KILLED, outcome preempted
    anything else (Ctrl+C, an exit)    -> KILLED, outcome killed

Only a SIGKILL runs no code: the parent then carries the pid and host of its process
(`normsweep.pid`/`normsweep.host`), and re-running the command reopens and closes it.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
from dataclasses import replace
from types import FrameType
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf

from src.core.patches import recast_job_return
from src.core.process_group import stat_fields
from src.core.terminal import say
from src.tracking import sweep
from src.tracking.store import Store
from src.tracking.summary import stored_verdict, sweep_note
from src.tracking.tags import (
    BENCH_TAG,
    FAILED,
    FINISHED,
    HOST_TAG,
    INCOMPLETE,
    KILLED,
    NOTE_TAG,
    OUTCOME_TAG,
    PARENT_TAG,
    PID_TAG,
    PREEMPTED,
    RESULT_OUTCOMES,
    SUPERSEDED_TAG,
    SWEEP_COMMAND_TAG,
    SWEEP_JOBS_TAG,
)

REASON_TAG = "sweep.end_reason"
STATUS = {FINISHED: "FINISHED", INCOMPLETE: "FAILED", FAILED: "FAILED", PREEMPTED: "KILLED", KILLED: "KILLED"}

_armed: SweepParent | None = None  # the open parent run of the multirun in this process


class SweepParent:
    def __init__(self, store: Store, run_id: str, stale_after_s: float) -> None:
        self.store = store
        self.run_id = run_id
        self.stale_after_s = stale_after_s
        self.failures: list[str] = []
        self.sigterm = False
        self.closed = False
        self._handler = self._on_sigterm  # one bound method, so it can be recognised later

    # --- what happened -------------------------------------------------------------------------
    def job_failed(self, reason: str) -> None:
        self.failures.append(reason)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.sigterm = True
        # Inside a fit Lightning calls this from its own handler and stops after the step (the job
        # saves its checkpoint); outside one, nothing would: end the sweep here.
        if signal.getsignal(signal.SIGTERM) is self._handler:
            raise SystemExit(128 + signum)

    # --- closing -------------------------------------------------------------------------------
    def close(self, outcome: str, reason: str) -> None:
        """Close the parent once: outcome tag, reason, note, MLflow status."""
        if self.closed:
            return
        self.closed = True
        parent = self.store.get_run(self.run_id)
        if parent is None:  # the store was replaced during the sweep: nothing to close
            return
        command = parent.data.tags.get(SWEEP_COMMAND_TAG, "")
        jobs_sentence = (
            f"Sweep {outcome}: {reason}. `{command}`. Its jobs and its speed check are nested under this run in the "
            "experiment's runs table (▸ before its name); the report with its figures is under Artifacts → report/report.html."
        )
        # The report (Hydra ends callbacks in reverse order: it ran before this) put the verdict first.
        note = sweep_note(jobs_sentence, stored_verdict(parent.data.tags))
        self.store.set_tags(self.run_id, {OUTCOME_TAG: outcome, REASON_TAG: reason, NOTE_TAG: note})
        self.store.terminate(self.run_id, STATUS[outcome])

    def _job_states(self) -> tuple[list[str], str]:
        """Each job's state (the latest run of each, superseded ones left out) and their counts."""
        parent = self.store.get_run(self.run_id)
        if parent is None:
            return [], "none"
        children = self.store.runs_tagged(parent.info.experiment_id, PARENT_TAG, self.run_id)
        # The training jobs: the speed check nested under the sweep is no job (5 jobs in, 5 jobs out).
        live = [r for r in children if SUPERSEDED_TAG not in r.data.tags and BENCH_TAG not in r.data.tags]
        states = [sweep.job_state(r, self.stale_after_s) for r in live]
        counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states))) or "none"
        self.store.set_tags(self.run_id, {SWEEP_JOBS_TAG: counts})
        return states, counts

    def other_copies_running(self) -> list[str]:
        """The jobs of this sweep that another copy (another terminal or node, same store) is still
        training: its RUNNING runs under this parent with a live process or a fresh heartbeat."""
        parent = self.store.get_run(self.run_id)
        if parent is None:
            return []
        children = self.store.runs_tagged(parent.info.experiment_id, PARENT_TAG, self.run_id)
        busy = [r for r in children if r.info.status == "RUNNING" and SUPERSEDED_TAG not in r.data.tags]
        # A pool's idle worker (loky keeps them a while) is this copy's: a run it left RUNNING is not another copy's.
        return [r.info.run_name for r in busy if sweep.is_alive(r, self.stale_after_s) and not _our_worker(r)]

    def close_at_end(self) -> None:
        """Every job returned: FINISHED if each has a result, else FAILED (incomplete), with the counts."""
        states, counts = self._job_states()
        ok = all(s in RESULT_OUTCOMES for s in states)
        self.close(FINISHED if ok else INCOMPLETE, f"{len(states)} jobs ({counts})")

    def close_at_exit(self) -> None:
        """The interpreter is exiting and the sweep's end was never reached."""
        if self.closed:
            return
        states, counts = self._job_states()
        if self.sigterm:
            self.close(PREEMPTED, f"stopped by SIGTERM with {counts}; re-run the same command to finish it")
        elif self.failures or FAILED in states:
            # Jobs in other processes (a pool's workers) report only through their runs.
            why = "; ".join(self.failures) or f"a job failed ({counts})"
            self.close(FAILED, why)
        else:
            error = getattr(sys, "last_value", None)  # an exception nobody caught (the interpreter printed it)
            what = f"{type(error).__name__}: {error}" if error is not None else "the process exited"
            self.close(KILLED, f"stopped before its end ({what}) with {counts}; re-run the same command to finish it")

    def arm(self) -> None:
        previous = signal.getsignal(signal.SIGTERM)
        if previous in (signal.SIG_DFL, None):  # keep a handler someone else installed
            signal.signal(signal.SIGTERM, self._handler)
        atexit.register(self._close_at_exit_or_warn)

    def _close_at_exit_or_warn(self) -> None:
        try:
            self.close_at_exit()
        except Exception as err:  # e.g. the store went away: say so in one line, not a traceback at exit
            from src.tracking.server_client import ServerLost

            if isinstance(err, ServerLost) and self.failures:  # a job's line said the server died; the re-run reopens this run
                return
            say(f"[normsweep] warning: sweep run {self.run_id} not closed: {type(err).__name__}: {err}", sys.stderr)


# Set in a job whose launcher waits on another machine or process for its result (submitit sets
# SUBMITIT_EXECUTOR; the one-node launcher sets it in its workers): a refusal there is the job's
# failed result, not a SystemExit, which would leave no result and keep the launcher waiting.
RESULT_AWAITED_ENV = "SUBMITIT_EXECUTOR"


class JobFailed(CompactHydraException):
    """A sweep job's one-line failure: Hydra prints its message alone (no traceback) at the sweep's end."""


class SaidFailure(JobReturn):
    """The result of a job that failed with its own line (`JobFailed`), already printed by the job:
    read by the sweeper at the sweep's end, it raises that failure without Hydra's line before it
    (`Error executing job with overrides: [...]`, every override of the job)."""

    @property
    def return_value(self) -> Any:
        value = returned(self)
        if self.status == JobStatus.COMPLETED:
            return value
        raise value

    @return_value.setter
    def return_value(self, value: Any) -> None:
        JobReturn.return_value.fset(self, value)  # type: ignore[attr-defined]


def returned(job_return: JobReturn) -> Any:
    """What a job returned, or the exception it failed with, without raising it: Hydra's public
    `return_value` read on a copy marked completed (on a failed job itself it raises, after a line)."""
    return JobReturn.return_value.fget(replace(job_return, status=JobStatus.COMPLETED))  # type: ignore[attr-defined]


def without_hydra_line(job_return: JobReturn) -> None:
    """Make a job's failure `SaidFailure` when the job said it in its own line (src/core/patches.py)."""
    if job_return.status == JobStatus.FAILED and isinstance(returned(job_return), JobFailed):
        recast_job_return(job_return, SaidFailure)


def open_parent(store: Store, run_id: str, stale_after_s: float) -> SweepParent:
    """Arm the exit paths for the parent run just opened (or reopened) by the sweep-start callback."""
    global _armed
    store.set_tags(run_id, sweep.liveness_tags())
    _armed = SweepParent(store, run_id, stale_after_s)
    _armed.arm()
    return _armed


def armed() -> SweepParent | None:
    return _armed


def disarm() -> None:
    global _armed
    if _armed is not None:
        atexit.unregister(_armed._close_at_exit_or_warn)
        if signal.getsignal(signal.SIGTERM) is _armed._handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _armed = None


def _our_worker(run: Any) -> bool:
    """The run's process is a child of this one (a worker of this copy's pool), on this host."""
    tags = run.data.tags
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False
    try:
        return int(stat_fields(tags[PID_TAG])[1]) == os.getpid()  # the field after the state: the parent's pid
    except OSError:
        return False


def still_running_elsewhere() -> list[str]:
    """The jobs of the armed sweep that another copy still trains ([] outside a sweep, or when this
    copy is the last): that copy writes the report and closes the sweep run when it ends."""
    return _armed.other_copies_running() if _armed is not None else []


def job_failed(reason: str) -> None:
    """A job of the running sweep failed or was refused (its one-line reason); no-op outside a sweep."""
    if _armed is not None:
        _armed.job_failed(reason)


def describe_job(config: Any) -> str:
    """`job 3 (hand_rmsnorm-s1)` for a job's config, as far as it is known."""
    # select, not attribute access: outside a multirun hydra.job.num is missing (`???`) and raises.
    num = OmegaConf.select(config, "hydra.job.num", default=None) if isinstance(config, DictConfig) else None
    name = config.get("run_name", "?") if hasattr(config, "get") else "?"
    return f"job {num} ({name})" if num is not None else f"the job ({name})"
