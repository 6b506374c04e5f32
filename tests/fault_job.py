"""`python -m src.train` with a real SIGKILL at a chosen point: `python tests/fault_job.py <point> <hydra args>`.

Points: `test` (the first test batch); `end_checkpoint_write` (writing the end-of-training checkpoint,
its temporary file complete, before the rename: every step is logged, the test is not).
The process dies as under `kill -9`: no handler, no cleanup, nothing closed.
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


class KillDuringTest(L.Callback):
    def on_test_batch_start(self, *args: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class KillInNextCheckpointWrite(L.Callback):
    """After the last step: the next checkpoint written (the end-of-training one) dies at its fsync."""

    def on_train_end(self, *args: Any) -> None:
        def die(fd: int) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        os.fsync = die


def install(point: str) -> None:
    kills = {"test": KillDuringTest, "end_checkpoint_write": KillInNextCheckpointWrite}
    if point in kills:
        base = train_module.RunCallbacks
        kill = kills[point]

        class WithKill(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.extra.append(kill())

        train_module.RunCallbacks = WithKill  # type: ignore[misc]
    else:
        raise SystemExit(f"unknown fault point {point!r}")


if __name__ == "__main__":
    install(sys.argv[1])
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    # The entry point's own task function, with its config folder named absolutely (Hydra would
    # otherwise look for it next to this script).
    task = train_module.main.__wrapped__
    hydra.main(version_base="1.3", config_path=str(REPO / "conf"), config_name="train")(task)()
