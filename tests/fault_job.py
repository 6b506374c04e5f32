"""`python -m src.train` with a real SIGKILL at a chosen point: `python tests/fault_job.py <point> <hydra args>`.

Points: `test` (the first test batch); `end_checkpoint_write` (writing the end-of-training checkpoint,
its temporary file complete, before the rename: every step is logged, the test is not): the process
dies as under `kill -9`, no handler, no cleanup, nothing closed. `store_full` / `store_gone` (after
optimizer step 6): the MLflow store's disk is filled (a file grows in its folder until ENOSPC: mount a
small tmpfs there) / its file is deleted, and the run goes on to meet it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import hydra  # noqa: E402
import lightning as L  # noqa: E402

import src.train as train_module  # noqa: E402
import src.training.run_life as run_life_module  # noqa: E402

FAULT_STEP = 6


class KillDuringTest(L.Callback):
    def on_test_batch_start(self, *args: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class KillInNextCheckpointWrite(L.Callback):
    """After the last step: the next checkpoint written (the end-of-training one) dies at its fsync."""

    def on_train_end(self, *args: Any) -> None:
        def die(fd: int) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        os.fsync = die


def fill_disk(folder: Path) -> None:
    """Grow a file in `folder` until its file system refuses another byte."""
    chunk = b"\0" * 2**16
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass


class StoreFault(L.Callback):
    def __init__(self, point: str) -> None:
        self.point = point

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != FAULT_STEP:
            return
        db = Path(trainer.loggers[0]._tracking_uri.removeprefix("sqlite:///"))
        if self.point == "store_full":
            fill_disk(db.parent)
        else:
            for path in (db, db.with_name(db.name + "-journal")):
                path.unlink(missing_ok=True)


def install(point: str) -> None:
    if point == "test":
        fault: L.Callback = KillDuringTest()
    elif point == "end_checkpoint_write":
        fault = KillInNextCheckpointWrite()
    elif point in ("store_full", "store_gone"):
        fault = StoreFault(point)
    else:
        raise SystemExit(f"unknown fault point {point!r}")
    base = run_life_module.RunCallbacks

    class WithFault(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.extra.append(fault)

    run_life_module.RunCallbacks = WithFault  # type: ignore[misc]


if __name__ == "__main__":
    install(sys.argv[1])
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    # The entry point's own task function, with its config folder named absolutely (Hydra would
    # otherwise look for it next to this script).
    task = train_module.main.__wrapped__
    hydra.main(version_base="1.3", config_path=str(REPO / "conf"), config_name="train")(task)()
