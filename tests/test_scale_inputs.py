"""The scale-out settings checked without a cluster: the SLURM launcher's fields, a job's own name for
requeueing, and the refusals that come before anything is submitted."""

from __future__ import annotations

import os

import pytest
from hydra.errors import MissingConfigException

from src.core.devices import DeviceSpec, check_device
from src.core.paths import ConfigError, compose, compose_error_line
from src.launch.slurm_launcher import sbatch_field
from src.training.preemption import slurm_job_id


@pytest.mark.parametrize(("accelerator", "expected"), [("cpu", None), ("gpu", 4)])
def test_a_cpu_job_asks_slurm_for_no_gpus(accelerator: str, expected: int | None) -> None:
    # sbatch refuses a gres on a partition without GPUs ("Invalid generic resource specification").
    cfg = compose(["cluster=slurm", f"cluster.accelerator={accelerator}", "cluster.devices=4"], with_hydra=True)
    assert cfg.hydra.launcher.gpus_per_node == expected
    assert cfg.hydra.launcher.tasks_per_node == 4
    assert cfg.hydra.launcher._target_.endswith("SlurmSweepLauncher")
    assert cfg.checkpoint.enabled  # a stopped job must come back to its step


def test_one_node_sweeps_start_each_jobs_processes_with_torchrun() -> None:
    cfg = compose(["cluster=gpu_node", "cluster.devices=4"], with_hydra=True)
    assert cfg.hydra.launcher._target_.endswith("NodeLauncher")
    assert cfg.hydra.launcher.nproc_per_node == 4


def test_an_array_task_requeues_itself_by_array_and_task(monkeypatch: pytest.MonkeyPatch) -> None:
    # Task 4 of array 4 has job id 4 too: `scontrol requeue 4` would requeue every task of the array.
    monkeypatch.setenv("SLURM_JOB_ID", "4")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    assert slurm_job_id() == "4_4"
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
    assert slurm_job_id() == "4"


def test_more_cpu_processes_than_cores_are_refused_by_name() -> None:
    cores = os.cpu_count() or 1
    spec = DeviceSpec("cpu", cores + 1, 1, "32-true", "fp32", "highest")
    with pytest.raises(ConfigError, match=rf"cluster.devices={cores + 1} .* {cores} cores"):
        check_device(spec)


def test_cluster_slurm_without_its_extra_names_the_install() -> None:
    err = MissingConfigException("Could not find 'hydra/launcher/submitit_slurm'", "hydra/launcher/submitit_slurm", ["basic"])
    assert compose_error_line(err) == "cluster=slurm: Hydra's submitit launcher is not installed; pip install -e '.[slurm]'"


@pytest.mark.parametrize(
    ("reason", "field"),
    [
        ("sbatch: error: invalid partition specified: nosuch", "hydra.launcher.partition"),
        ("sbatch: error: Invalid generic resource (gres) specification", "hydra.launcher.gpus_per_node"),
        ("sbatch: error: Invalid account or account/partition combination specified", "hydra.launcher.account"),
        ("sbatch: error: Batch job submission failed: Invalid qos specification", "hydra.launcher.qos"),
        ("sbatch: error: something else", "hydra.launcher"),
    ],
)
def test_an_sbatch_refusal_names_the_field_it_is_about(reason: str, field: str) -> None:
    assert sbatch_field(reason) == field
