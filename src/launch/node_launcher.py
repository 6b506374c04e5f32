"""A sweep of multi-process jobs on one node: the jobs one after another, each job's processes
started by torchrun (`torch.distributed.run --standalone`, one per device).

Lightning's own DDP launcher would re-run `sys.argv` — with `-m` and the sweep lists — in every
rank (Lightning #11300). Under torchrun Lightning sees `TorchElasticEnvironment` and starts no
process itself. Each worker loads the job as submitit's workers do (this launcher pickled with
Hydra's state, src/launch/node_job.py); rank 0 decides the job's plan (src/tracking/run_plan.py)
and leaves its result for this process. A SIGTERM or Ctrl+C here reaches every worker through
torchrun: the job checkpoints and is recorded as pre-empted, and the sweep stops; its re-run
continues it. Hydra instantiates launchers only from `hydra_plugins`: the class Hydra sees is the
subclass in hydra_plugins/normsweep_launchers/node.py (cluster=gpu_node sets it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from src.core.compositions import job_config
from src.core.parent_death import terminated_with_parent
from src.core.terminal import say
from src.launch.done_jobs import in_order, lost, split_done
from src.launch.sweep_end import RESULT_AWAITED_ENV, JobFailed, job_failed, without_hydra_line
from src.launch.torchrun_output import KilledRank, TorchrunOutput

RESULT_FILE = "result.pkl"
JOB_FILE = "job.pkl"


class NodeLauncher(Launcher):
    def __init__(self, nproc_per_node: int = 1) -> None:
        self.nproc_per_node = int(nproc_per_node)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # Imported here: Hydra imports every launcher plugin at start-up, and Lightning takes seconds.
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        if TorchElasticEnvironment.detect():
            # The whole sweep already runs under torchrun (`torchrun ... -m src.train -m ...`): each
            # process runs the jobs in step, in itself; rank 0 of each job decides for all of them.
            state = Singleton.get_state()
            return [self.run_one(list(o), initial_job_idx + i, state) for i, o in enumerate(job_overrides)]
        pending, returns = split_done(self, job_overrides, initial_job_idx)
        for num, overrides in pending:
            returns[num] = self._run(num, overrides)
        return in_order(initial_job_idx, len(job_overrides), returns)

    def _run(self, num: int, overrides: list[str]) -> JobReturn:
        """One job: its `nproc_per_node` processes under torchrun, this process waiting for them."""
        import cloudpickle

        assert self.config is not None
        folder = Path(str(self.config.hydra.sweep.dir)) / ".node_jobs" / str(num)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RESULT_FILE).unlink(missing_ok=True)
        with open(folder / JOB_FILE, "wb") as f:
            cloudpickle.dump((self, overrides, num, Singleton.get_state()), f)
        name = " ".join(filter_overrides(overrides))
        say(f"[normsweep] job #{num} on {self.nproc_per_node} processes: {name}")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.nproc_per_node}",
                   "-m", "src.launch.node_job", str(folder)]  # fmt: skip
        stopped: list[int] = []
        # torchrun's default of one thread per worker suits GPUs; on the CPU each worker gets its share.
        threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // self.nproc_per_node))
        env = {**os.environ, "OMP_NUM_THREADS": threads, RESULT_AWAITED_ENV: "node"}
        # Read through src/launch/torchrun_output.py: a rank killed by a signal is one line, not 47.
        # torchrun dies with this process, even by SIGKILL, taking the ranks with it (src/core/parent_death.py).
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=terminated_with_parent())  # fmt: skip
        output = TorchrunOutput(proc.stdout, proc.stderr)  # type: ignore[arg-type]

        def forward(signum: int, frame: Any) -> None:  # torchrun passes it on to every worker
            stopped.append(signum)
            proc.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        killed = output.finish(summarize=not stopped)
        if stopped:  # the job saved its state as pre-empted (src/training/run_life.py); the sweep stops here
            say(f"[normsweep] sweep stopped by {signal.Signals(stopped[0]).name} in job #{num}; "
                  "re-run the same command to continue")  # fmt: skip
            raise SystemExit(0)
        result = folder / RESULT_FILE
        if killed is not None:
            return killed_rank_result(self._named(num, overrides), overrides, result, killed)
        if result.is_file():
            with open(result, "rb") as f:
                return cloudpickle.load(f)
        return lost(overrides, f"{name}: its processes ended (torchrun exit {code}) without a result; "
                                "re-run the same command to continue it from its checkpoint")  # fmt: skip

    def _named(self, num: int, overrides: list[str]) -> str:
        """`job 3 (hand_rmsnorm-s1)`: the job's number and run name, as far as its config composes."""
        assert self.config is not None and self.hydra_context is not None
        try:
            return f"job {num} ({job_config(self.config, overrides, self.hydra_context.config_loader).run_name})"
        except Exception:  # a job that does not compose refused itself in its own words already
            return f"job {num}"

    def run_one(self, overrides: list[str], num: int, state: dict[type, Singleton]) -> JobReturn:
        """In each worker: the job, as Hydra's own launchers run one."""
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        Singleton.set_state(state)
        setup_globals()
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(config.hydra.job):
            config.hydra.job.num = num
            config.hydra.job.id = f"node_job_{num}"
        return run_job(
            hydra_context=self.hydra_context, task_function=self.task_function, config=config,
            job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
        )  # fmt: skip


def killed_rank_result(who: str, overrides: list[str], result_file: Path, killed: KilledRank) -> JobReturn:
    """The job's result when one of its ranks was killed: rank 0's own (its run closed as rank 0 saw it)
    with the failure said in one line naming the killed rank; a lost job when rank 0 itself died."""
    import cloudpickle

    result: JobReturn | None = None
    if result_file.is_file():
        with open(result_file, "rb") as f:
            result = cloudpickle.load(f)
    if result is not None and result.status == JobStatus.COMPLETED:
        return result  # the job had finished when the rank died: nothing was lost
    # Rank 0 either closed its run (the lost peer as its error) or was stopped first, leaving it RUNNING:
    # the re-run settles either, as it does for a pool's lost worker.
    line = (
        f"error: {who}: rank {killed.rank} (pid {killed.pid}) was killed by {killed.signal}; torchrun stopped the "
        "job's other ranks: re-run the same command to go on (finished jobs are skipped, this one resumes from its "
        "checkpoint or starts again)"
    )
    say(f"[normsweep] {line}", sys.stderr)
    job_failed(line.removeprefix("error: "))  # the sweep run's end reason
    if result is None:
        result = lost(overrides, line)
    result.return_value = JobFailed(line)
    without_hydra_line(result)  # said above: the sweep's end repeats the line alone, not Hydra's overrides
    return result
