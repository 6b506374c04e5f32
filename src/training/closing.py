"""The end of a run's MLflow record, whatever way training ends.

`RunClosing` is the context `train()` fits and tests in: leaving it closes the run once, with the
outcome the body reported (`finish`), or with the one the exception implies:

    SIGTERM (pre-emption)       -> preempted (KILLED); exits 0 so a requeued job resumes
    under SLURM, also SIGUSR1/2 -> preempted (KILLED); rank 0 asks SLURM to requeue the job
    Ctrl+C, SystemExit          -> killed (KILLED); Ctrl+C says how to resume
    a full checkpoint disk      -> failed (FAILED), its one-line message as the run's note
    any other exception         -> failed (FAILED), re-raised as `RunFailed`: one line (src/training/failures.py)
    the store's disk full, or its file gone -> left RUNNING (nothing can be written), `RunFailed`

A SIGKILL runs no code at all: the run stays RUNNING with a heartbeat that stops, and the next run
of the sweep (or `python -m src.report --status`) sees it as lost (src/tracking/sweep.py).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from src.tracking.tracker import Tracker
from src.training.atomic_io import CheckpointSpaceError
from src.training.checkpointing import LAST, SaveOnSigterm
from src.training.failures import failed_after_recording, keep_traceback
from src.training.preemption import AgreedSigterm, requeue_this_job, slurm_job_id


class RunClosing:
    def __init__(self, tracker: Tracker | None, run_name: str, sigterm: SaveOnSigterm, stop: AgreedSigterm) -> None:
        self.tracker = tracker
        self.run_name = run_name
        self.sigterm = sigterm  # knows, after the fact, where the state was saved
        self.stop = stop  # knows which signal stopped the run
        self.outcome: str | None = None
        self.note: str | None = None

    def finish(self, outcome: str, note: str) -> None:
        """The body's own result: closed with it when the context is left without an exception."""
        self.outcome, self.note = outcome, note

    def _close(self, outcome: str, note: str | None = None) -> None:
        if self.tracker is not None:
            self.tracker.close(outcome, note=note)

    def _resume_hint(self) -> str:
        last = self._checkpoint()
        if last is not None and last.is_file():
            return f"run closed as killed; re-run the same command to continue from {last}"
        return "run closed as killed; no checkpoint (checkpoint.enabled=false), so a re-run starts over"

    def _fail(self, err: BaseException) -> None:
        """Close the run FAILED, then raise the one line that says what happened and how to go on."""
        if isinstance(err, CheckpointSpaceError):  # its own line says it all (src/train.py prints it)
            self._close("failed", str(err))
            return
        tracker = self.tracker
        db = tracker.store.db if tracker is not None else None
        failure = failed_after_recording(err, self.run_name, tracker.run_id if tracker else None, self._checkpoint(), db)
        if not failure.store_broken:  # a store that broke cannot record its own failure
            try:
                self._close("failed")
            except Exception as close_err:  # the original error is the one to report
                keep_traceback(close_err)
        raise failure from err

    def _checkpoint(self) -> Path | None:
        return self.sigterm.dirpath / LAST if self.sigterm.dirpath is not None else None

    def __enter__(self) -> RunClosing:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if err is None:
            self._close(self.outcome or "failed", self.note)
        elif isinstance(err, SIGTERMException):
            self._close("preempted")
            saved = self.sigterm.saved
            if rank_zero_only.rank == 0:  # one line, not one per DDP rank; one requeue per job
                then = requeue_this_job() if slurm_job_id() and saved else "re-run the same command to resume"
                where = f"checkpoint saved at {saved}; {then}" if saved else "no checkpoint (checkpoint.enabled=false)"
                print(f"[normsweep] {self.run_name} stopped by {self.stop.signal_name or 'SIGTERM'}: {where}", flush=True)
            # No result is left for a launcher that waits for one (submitit): the requeued job gives it.
            raise SystemExit(0) from None
        elif isinstance(err, (KeyboardInterrupt, SystemExit)):
            self._close("killed")
            # Lightning turns Ctrl+C into a silent sys.exit(1): say what happened and how to go on.
            interrupted = isinstance(err, KeyboardInterrupt) or err.code not in (0, None)
            if interrupted and rank_zero_only.rank == 0:
                print(f"[normsweep] {self.run_name} interrupted (Ctrl+C): {self._resume_hint()}", flush=True)
        elif isinstance(err, Exception):
            self._fail(err)
        else:
            self._close("failed")
        return False
