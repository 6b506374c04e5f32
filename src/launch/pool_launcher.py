"""Hydra's joblib launcher (`cluster=cpu_pool` / `gpu_pool`), with a lost worker said in one line.

A SIGKILLed worker (the OOM killer, `kill -9`) made joblib raise `TerminatedWorkerError`, which
Hydra printed as 69 lines naming neither the job nor how to go on. Here it becomes one line
(`src.launch.pool.lost_workers_line`) naming the lost jobs, recorded too as the sweep run's end
reason. The class Hydra sees is the subclass in hydra_plugins/normsweep_launchers/pool.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

from src.launch import sweep_end
from src.launch.pool import FirstDeath, lost_workers_line


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
