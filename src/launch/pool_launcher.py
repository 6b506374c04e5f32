"""Hydra's joblib launcher (`cluster=cpu_pool` / `gpu_pool`), with a lost worker said in one line.

A SIGKILLed worker (the OOM killer, `kill -9`) made joblib raise `TerminatedWorkerError`, which
Hydra printed as 69 lines naming neither the job nor how to go on. Here it becomes one line
(`lost_workers_line`) naming the lost jobs, recorded too as the sweep run's end
reason. The class Hydra sees is the subclass in hydra_plugins/normsweep_launchers/pool.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

from src.launch import sweep_end
from src.launch.pool import RUNNING_DIR


def lost_jobs(slots_dir: Path) -> list[dict[str, Any]]:
    """The jobs the pool's workers were running when it broke, by job number: joblib stops every
    worker once one is gone, so each of them is lost (some may still be exiting)."""
    found = []
    for path in sorted((slots_dir / RUNNING_DIR).glob("job-*.json")):
        with contextlib.suppress(ValueError, OSError):
            found.append(json.loads(path.read_text()))
    return sorted(found, key=lambda j: int(j["num"]))


class FirstDeath:
    """Which worker died first: joblib kills the pool's other workers once one is gone, so every
    job's process is dead by the time the error arrives. A thread watches the workers' pids
    (pidfd, Linux >= 5.3) as their jobs start and notes the first to exit."""

    def __init__(self, slots_dir: Path, poll_s: float = 0.2) -> None:
        self.folder = slots_dir / RUNNING_DIR
        self.poll_s = poll_s
        self.first: set[int] = set()  # the pid(s) seen dead first (two when they died in one poll)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="normsweep-pool-watch", daemon=True)

    def __enter__(self) -> FirstDeath:
        if hasattr(os, "pidfd_open"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        fds: dict[int, int] = {}  # pidfd -> pid
        poller = select.poll()
        try:
            while not self._stop.is_set() and not self.first:
                for path in self.folder.glob("job-*.json"):
                    with contextlib.suppress(ValueError, OSError, KeyError):
                        pid = int(json.loads(path.read_text())["pid"])
                        if pid not in fds.values() and pid not in self.first:
                            try:
                                fd = os.pidfd_open(pid)
                            except ProcessLookupError:  # died before it was watched: among the first
                                self.first.add(pid)
                                continue
                            fds[fd] = pid
                            poller.register(fd, select.POLLIN)
                if self.first:
                    break
                self.first = {fds[fd] for fd, _ in poller.poll(self.poll_s * 1000)}
        finally:
            for fd in fds:
                os.close(fd)


def lost_workers_line(slots_dir: Path, err: BaseException, n_jobs: int, first: set[int] | None = None) -> str:
    """One line for a pool that lost a worker: the job it ran, the jobs stopped with it, what to do."""
    jobs = lost_jobs(slots_dir)
    codes = str(err).partition("exit codes of the workers are ")[2].split("\n", 1)[0].strip(" {}") or "unknown"
    killed = [j for j in jobs if int(j["pid"]) in (first or set())] or jobs
    others = [j for j in jobs if j not in killed]

    def named(group: list[dict[str, Any]]) -> str:
        return ", ".join(f"job {j['num']} ({j['run_name']}, pid {j['pid']})" for j in group)

    lost = named(killed) or "no job (none had started)"
    stopped = f"; joblib stopped the pool's other workers with it: {named(others)}" if others else ""
    n = len(jobs)
    return (
        f"error: lost {lost}: its pool worker was killed (exit code {codes}){stopped}; "
        f"{'their runs, if opened, stay' if n != 1 else 'its run, if opened, stays'} RUNNING until the re-run settles "
        f"{'them' if n != 1 else 'it'}: re-run the same command (of the {n_jobs} jobs, finished ones are skipped, "
        "lost ones resume from their checkpoint or start again)"
    )


class PoolLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        slots = Path(str(self.config.hydra.sweep.dir)) / ".slots"
        try:
            with FirstDeath(slots) as watch:
                return super().launch(job_overrides, initial_job_idx)
        except Exception as err:
            # Told by its name: joblib (loky's TerminatedWorkerError) is hydra-joblib-launcher's dependency, not ours.
            if type(err).__name__ != "TerminatedWorkerError":
                raise
            line = lost_workers_line(slots, err, len(job_overrides), watch.first)
            sweep_end.job_failed(line.removeprefix("error: "))  # the sweep run's end reason
            raise sweep_end.JobFailed(line) from None
