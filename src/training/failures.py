"""The one place an exception becomes the one line a job ends with; the traceback goes to the job's log file.

Before the run is recorded, every refusal is a `ConfigError` naming the field (`config error: ...`).
After it, `RunFailed` carries one line saying what happened (the store's disk is full, its file
disappeared, out of memory, or the exception in one line), what became of the MLflow run and the
checkpoint, and how to continue. The full traceback is written to the job's log file (Hydra's
`<output dir>/<job name>.log`), never to the terminal; the line names that file.

`job_ending` words whatever `train()` raised (a refusal, a run that failed after it was recorded,
an error no check foresaw, rank 0's refusal reaching another rank); the entry point only acts on it
(src/train.py), and `src.core.cli` gives a line its exit code by its prefix (`config error:` 2,
`error:` 1). The contract is docs/faults.md's.
"""

from __future__ import annotations

import logging
import shutil
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from src.core.atomic_io import CheckpointSpaceError
from src.core.paths import ConfigError, PeerRefused, nearest_existing
from src.tracking.retry import causes
from src.tracking.server_client import ServerLost
from src.tracking.store_faults import STORE_FULL, store_fault

# MLflow logs every failed SQL statement with its traceback at ERROR before raising it (13 tracebacks
# for one full disk): the exception is reported once, as a line, and these go to the log file.
STORE_LOGGERS = (
    "mlflow.store.db.utils",
    "mlflow.system_metrics.system_metrics_monitor",
    # A tracking server that died: urllib3's retry warnings and the background metric queue's ERROR
    # lines buried the run's one line (8th of 10); they belong to the job's log.
    "urllib3",
    "mlflow.utils.async_logging",
)
RESUME = "a single run: with resume=true"  # a sweep's re-run resumes its jobs by itself
TRACEBACK_FILE = "traceback.log"  # in the job's output folder when Hydra's job logging writes no file


class RunFailed(RuntimeError):
    """The run stopped after it was recorded; the message is the one line to show."""

    def __init__(self, line: str, store_broken: bool = False) -> None:
        super().__init__(line)
        self.store_broken = store_broken  # the next jobs of a sweep would meet the same store


def is_out_of_memory(err: BaseException) -> bool:
    """An allocator that could not allocate: CUDA's `OutOfMemoryError`; the CPU's allocator raises a plain
    `RuntimeError` (c10::Error) whose only mark is its text. Without torch imported there was no
    allocation (a refusal is worded without importing it)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(err)


def _file_handlers() -> list[logging.FileHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]


def route_store_errors_to_log() -> None:
    """Send MLflow's per-statement store errors to the job's log file only (see STORE_LOGGERS)."""
    handlers = _file_handlers()
    if not handlers:  # not a Hydra job (a test, a notebook): left as MLflow set them
        return
    for name in STORE_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = list(handlers)
        logger.propagate = False


def keep_traceback(err: BaseException) -> Path | None:
    """Write `err`'s full traceback to the job's log file; its path (None outside a Hydra job)."""
    text = "".join(traceback.format_exception(err))
    handlers = _file_handlers()
    if handlers:
        record = logging.LogRecord("normsweep", logging.ERROR, __file__, 0, "%s", (text,), None)
        for handler in handlers:
            handler.handle(record)
        return Path(handlers[0].baseFilename)
    if HydraConfig.initialized():
        path = Path(HydraConfig.get().runtime.output_dir) / TRACEBACK_FILE
        with open(path, "a") as f:
            f.write(text)
        return path
    return None


def first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def describe_store_fault(fault: str, db: Path) -> str:
    """The fault in words, for the one line a run ends with."""
    if fault == STORE_FULL:
        free = shutil.disk_usage(nearest_existing(db.parent)).free
        return f"the MLflow store's disk is full ({db.parent}: {free:,} bytes free)"
    return f"the MLflow store file {db} disappeared while the run wrote to it (deleted or moved)"


def what_happened(err: BaseException, db: Path | None) -> tuple[str, bool]:
    """`err` in words, and whether it was the store that broke."""
    fault = store_fault(err, db)
    if fault is not None:
        assert db is not None
        return describe_store_fault(fault, db), True
    if is_out_of_memory(err):
        return (
            f"out of memory ({first_line(err)[:160]}); lower optim.micro_batch_size (or seq_len); "
            "`python -m src.preflight <overrides>` estimates a step's peak memory",
            False,
        )
    return first_line(err), False


def failed_after_recording(
    err: BaseException, run_name: str, run_id: str | None, checkpoint: Path | None, db: Path | None
) -> RunFailed:
    """The one line for a run that failed after its MLflow run was created (see the module's docstring)."""
    saved = checkpoint is not None and checkpoint.is_file()
    lost = next((c for c in causes(err) if isinstance(c, ServerLost)), None)
    if lost is not None:
        # Nothing more reaches the server, the run's end included (Tracker.close writes nothing then):
        # the run stays RUNNING until a re-run, with the server back, settles it as lost and resumes it.
        # Every later job would meet the same server, so the line ends the command (store_broken).
        how = f"to continue from {checkpoint}" if saved else "(no checkpoint: it starts over)"
        return RunFailed(
            f"{run_name}: {lost.what}; run {run_id} stays RUNNING (its end could not be recorded); once the server "
            f"is back, re-run the same command {how}",
            store_broken=True,
        )
    what, store_broken = what_happened(err, db)
    if store_broken:
        fault = store_fault(err, db)
        record = f"run {run_id} stays RUNNING in it (nothing more could be written)"
        if fault == STORE_FULL:
            fix = f"free space on {db.parent if db else 'its disk'}, then re-run the same command"
            how = f"{fix} ({RESUME}): it continues from {checkpoint}" if saved else f"{fix}: it starts the run over"
        else:
            # A new store has no run for the checkpoint to continue: a single run refuses to write over
            # it, so starting over takes the file out of the way (a sweep's job moves it aside itself).
            how = (
                f"restore the file (from a backup) and re-run the same command ({RESUME}) to continue from {checkpoint}, "
                f"or re-run the same command to start over in a new store (a single run: after removing {checkpoint})"
                if saved
                else "restore the file (from a backup), or re-run the same command to start over in a new store"
            )
    else:
        record = f"run {run_id} closed FAILED"
        how = f"re-run the same command ({RESUME}) to continue from {checkpoint}" if saved else "a re-run starts it over"
    return RunFailed(f"{run_name}: {what}; {record}; {how}", store_broken)


@dataclass(frozen=True)
class Ending:
    """How a job that `train()` could not finish ends: its one line, and what the entry point does."""

    line: str
    how: str  # "refused": the command ends (a refusal, a full checkpoint disk, a lost server);
    # "failed": a sweep's other jobs still run unless the store broke; "peer": rank 0 said why
    store_broken: bool = False


def traceback_note(err: BaseException) -> str:
    path = keep_traceback(err)
    return f" (traceback: {path})" if path else ""


def job_ending(err: Exception, run_name: str, db: Callable[[], Path | None]) -> Ending:
    """The one line for whatever `train()` raised; `db`: the SQLite store's file (None: another store)."""
    if isinstance(err, PeerRefused):  # rank 0 of this job refused it and says why; this rank ends with it
        return Ending(f"rank 0 refused the job: {err}", "peer")
    if isinstance(err, (ConfigError, CheckpointSpaceError, ServerLost)):
        # A clear one-line message; Hydra prints the traceback only with HYDRA_FULL_ERROR=1. A full
        # checkpoint disk has closed the run as failed, and the previous checkpoint is intact; so is
        # the last checkpoint of a run whose tracking server stopped answering.
        return Ending(f"config error: {err}" if isinstance(err, ConfigError) else f"error: {err}", "refused")
    if isinstance(err, RunFailed):  # after the run was recorded: what became of it, and how to go on
        return Ending(f"error: {err}{traceback_note(err.__cause__ or err)}", "failed", err.store_broken)
    # Before the run was recorded, and no check foresaw it.
    what, store_broken = what_happened(err, db())
    return Ending(f"error: {run_name}: {what}; nothing was recorded for this run{traceback_note(err)}", "failed", store_broken)
