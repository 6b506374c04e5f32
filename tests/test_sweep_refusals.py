"""A sweep refused for its settings says so once, before Hydra launches anything: the report's
settings (checked before, only after the whole sweep had trained), the sweeper's, a key no config
has, a policy that does not exist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_cli, run_train, unwrapped

from src.core.schema import SPEED_KERNEL_S_MAX

CASES = {
    # exit 0 after training the whole sweep, "warning: sweep report not generated", the sweep FINISHED
    "margin": (["report.margin.speed=0"], "config error: report.margin.speed: must be a number > 0, got 0"),
    # accepted, then `OverflowError: timeout is too large` killed the report after the sweep
    "kernel_s": (["report.speed_kernel_s=1e9"], f"config error: report.speed_kernel_s: must be a number of seconds in [0, {SPEED_KERNEL_S_MAX}]"),
    # printed twice, and Hydra launched job 0 (its .hydra/ folder written) before the job refused it
    "sweeper": (["hydra/sweeper=sequential", "hydra.sweeper.futility=1.5"], "config error: hydra.sweeper.futility: must be a number in [0, 1)"),
    "unknown_key": (["foo=1,2"], "config error: foo: no such key (the config's keys: norm, model, seed, "),
    "policy": (["sweep.on_code_change=nonsense"], "config error: sweep.on_code_change: 'nonsense' is not one of"),
    "untracked": (["logger=none", "report.margin.test_loss=-1"], "config error: report.margin.test_loss: must be a number > 0"),
    # the whole sweep trained, then "warning: sweep report not generated: FileNotFoundError", exit 0
    "reports_dir": (["paths.reports_dir=/proc/normsweep"], "config error: paths.reports_dir: /proc is not writable"),
    # a sweep run recorded (left KILLED, no reason), workers started, each job refused in turn
    "devices": (["cluster=gpu_node", "cluster.accelerator=cpu", "cluster.devices=999"], "config error: cluster.devices=999 processes on the CPU"),
}


# Run in this process through the entry point (helpers.run_train); the first case also as a user's
# command, a process of its own: the exit status and the one line are the process's.
IN_A_PROCESS = {"margin"}


@pytest.mark.fresh_store  # asserts that no store file is written
@pytest.mark.slow  # a sweep's checks before launch (one case a CLI process)
@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_sweep_says_it_once_before_hydra_launches_anything(
    case: str, tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    args, start = CASES[case]
    command = ["-m", "norm=hand_layernorm,torch_layernorm", *tiny_overrides, *args]
    proc = run_cli("src.train", *command, timeout=300) if case in IN_A_PROCESS else run_train(*command)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith(start), lines
    assert not (tmp_path / "multirun").exists()  # Hydra launched nothing (no job folder, no multirun.yaml)
    assert not Path(store["db"]).exists()  # nothing recorded, not even a store
    # The in-process multirun leaves no Hydra state behind: the worker's next job is not a sweep's job.
    from src.core.cli import in_multirun

    assert not in_multirun()


def test_unread_swept_keys_are_those_outside_the_schema() -> None:
    from src.launch.unread_keys import unread_swept_keys

    jobs = [{"overrides": [f"+foo={v}", f"norm={n}", "+probe=1", f"hydra.job.chdir={v}"]} for v, n in ((1, "a"), (2, "b"))]
    assert unread_swept_keys(jobs) == ["foo"]  # probe is not swept here (one value); norm and hydra.* are read
    assert unread_swept_keys([{"overrides": ["seed=0"]}, {"overrides": ["seed=1"]}]) == []


def test_a_swept_key_nothing_reads_is_warned_about_before_training(tiny_overrides: list[str], tmp_path: Path) -> None:
    """`+foo=1,2` trained two identical variants without a word. The warning comes
    before anything trains (here a reference value the sweep lacks, checked once every job is composed,
    stops the sweep right after it) and does not stop the sweep itself: tests sweep an unread
    `+probe=...` on purpose. The entry point runs in this process (helpers.run_train): the refused case
    above keeps the process's exit status and line."""
    proc = run_train("-m", "+foo=1,2", *tiny_overrides, "report.reference={foo: 3}")
    lines = [line for line in unwrapped(proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2, lines
    assert len(lines) == 2, lines
    assert lines[0].startswith("[normsweep] warning: foo: no part of the config reads it"), lines
    assert "the sweep goes on" in lines[0] and "seed=0,1" in lines[0]
    assert lines[1].startswith("config error: report.reference"), lines
    assert not (tmp_path / "multirun").exists()


def _without_slurm(path: str) -> str:
    """PATH without the folders that hold SLURM's commands (a laptop, a machine outside the cluster)."""
    from src.launch.callbacks import SLURM_COMMANDS

    return os.pathsep.join(d for d in path.split(os.pathsep) if d and not any((Path(d) / c).exists() for c in SLURM_COMMANDS))


SLURM_REFUSAL = "config error: cluster=slurm: no sbatch or srun on PATH: this machine cannot submit to SLURM"


def test_a_slurm_sweep_without_slurm_is_refused_before_the_store(monkeypatch: pytest.MonkeyPatch, store: dict[str, str]) -> None:
    """`cluster=slurm` where sbatch and srun are missing: submitit refused it after 60 s, once the
    sweep's run was recorded (and left KILLED with a garbled reason). The sweep-start callback, what
    `python -m src.train -m` runs before anything is recorded, refuses it first."""
    from src.core.paths import compose
    from src.launch.callbacks import MlflowSetup

    monkeypatch.setenv("PATH", _without_slurm(os.environ.get("PATH", "")))
    cfg = compose(["cluster=slurm", "hydra.launcher.partition=gpu", "logger.tracking_uri=http://127.0.0.1:9",
                   f"paths.mlflow_db={store['db']}"], with_hydra=True)  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        MlflowSetup().on_multirun_start(cfg)
    assert str(refused.value.code).startswith(SLURM_REFUSAL) and "\n" not in str(refused.value.code)
    assert not Path(store["db"]).exists()


@pytest.mark.fresh_store  # asserts that no store file is written
@pytest.mark.slow  # one CLI process (refused before torch is imported)
def test_a_slurm_sweep_without_slurm_is_one_line_in_seconds(tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    """The probe's command on a machine without SLURM: one line, exit 2, well within 30 s, nothing recorded."""
    import subprocess
    import sys
    import time

    from helpers import REPO, cli_env

    env = {**cli_env(), "PATH": _without_slurm(os.environ.get("PATH", ""))}
    args = [sys.executable, "-m", "src.train", "-m", "norm=hand_layernorm,torch_layernorm", *tiny_overrides,
            "cluster=slurm", "cluster.accelerator=cpu", "cluster.devices=1", "cluster.num_nodes=1"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(SLURM_REFUSAL), lines
    assert took < 30, f"{took:.1f} s"
    assert not Path(store["db"]).exists() and not (tmp_path / "multirun").exists()
