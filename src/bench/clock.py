"""A Hydra callback that writes when each job of a multirun starts and ends (`python -m src.bench overhead`).

Added to a sweep from the command line (`+hydra.callbacks.bench_clock._target_=src.bench.clock.Clock`),
it appends one JSON line per event to the file named by CLOCK_ENV: the same clock for the tool's
sweep and for the floor's, so that both are timed alike. Listed last among the callbacks, it hears a
job's end before the tool's own end-of-job hooks, which therefore count as the next job's overhead.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from hydra.experimental.callback import Callback

CLOCK_ENV = "NORMSWEEP_BENCH_CLOCK"


def _write(event: str) -> None:
    path = os.environ.get(CLOCK_ENV)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"event": event, "t": time.time()}) + "\n")


class Clock(Callback):
    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        _write("job_start")

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        _write("job_end")
