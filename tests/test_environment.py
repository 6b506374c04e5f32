"""Every run records what it ran on: versions, device, host, world size, git state, determinism."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from src.core.paths import PROJECT_ROOT, compose
from src.tracking.environment import environment_tags, physical_cores
from src.tracking.git import GitState, git_state
from src.train import train

ENV_TAGS = {"env.torch", "env.cuda", "env.cudnn", "env.lightning", "env.hydra", "env.mlflow", "env.device",
            "env.host", "env.world_size", "env.python"}  # fmt: skip


def test_environment_tags_name_versions_and_device() -> None:
    tags = environment_tags(world_size=4, device="cpu")
    assert set(tags) >= ENV_TAGS and all(isinstance(v, str) and v for v in tags.values())
    assert tags["env.torch"] == torch.__version__ and tags["env.world_size"] == "4"
    assert tags["env.lightning"][0].isdigit() and tags["env.mlflow"][0].isdigit()
    assert f"torch uses {torch.get_num_threads()})" in tags["env.device"]  # CPU: model, cores, threads


def test_what_cannot_change_is_read_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's jobs share a process: its versions, host and platform are read once (each job read
    them again, ~2 ms of CPU, most of it three packages' metadata); torch's thread count, which a
    process may change, is read for each run."""
    import platform

    from src.tracking import environment

    environment_tags(device="cpu")
    read: list[str] = []
    version, where = environment.package_version, platform.platform
    monkeypatch.setattr(environment, "package_version", lambda dist: read.append(dist) or version(dist))
    monkeypatch.setattr(platform, "platform", lambda *a, **k: read.append("platform") or where(*a, **k))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = environment_tags(device="cpu")
        torch.set_num_threads(2)
        two = environment_tags(world_size=2, device="cpu")
    finally:
        torch.set_num_threads(threads)
    assert read == []
    assert "torch uses 1)" in one["env.device"] and "torch uses 2)" in two["env.device"]
    assert two["env.world_size"] == "2" and {k: v for k, v in one.items() if k not in ("env.device", "env.world_size")} == {
        k: v for k, v in two.items() if k not in ("env.device", "env.world_size")
    }


def test_physical_cores_agree_with_the_kernel_topology() -> None:
    """The cores in the CPU's tag are physical cores: /proc/cpuinfo's (package, core) pairs, the same
    count as the kernel's sysfs topology, never more than the logical CPUs; '?' where unknown."""
    cores, tag = physical_cores(), environment_tags(device="cpu")["env.device"]
    cpuinfo = Path("/proc/cpuinfo")
    if not (cpuinfo.is_file() and "core id" in cpuinfo.read_text()):
        assert cores is None and "(? cores," in tag
        return
    assert cores is not None and 1 <= cores <= (os.cpu_count() or 0) and f"({cores} cores," in tag
    topology = sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"))
    if topology:  # each logical CPU's package and core, as the kernel numbers them
        pairs = {((t / "physical_package_id").read_text().strip(), (t / "core_id").read_text().strip()) for t in topology}
        assert cores == len(pairs)


def test_git_state_matches_git() -> None:
    state = git_state()
    head = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert state.commit == head.stdout.strip()
    assert state.dirty == bool(state.diff)  # a dirty checkout carries its diff; a clean one none
    assert GitState("abc", True, "d").tags() == {"git_commit": "abc", "git_dirty": "true"}


@pytest.mark.slow
def test_run_records_environment_and_deterministic_mode(tiny_overrides: list[str], store: dict[str, str]) -> None:
    cfg = compose([*tiny_overrides, "experiment_name=env", "deterministic=true", "optim.max_steps=2", "val_every_n_steps=1"])
    try:
        result = train(cfg)
        # Lightning's deterministic mode switched torch's flag on for this run.
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)  # the process goes on to other tests
    client = MlflowClient(store["uri"])
    tags = client.get_run(result.run_id).data.tags
    assert set(tags) >= ENV_TAGS
    assert tags["deterministic"] == "true" and tags["env.world_size"] == "1"
    assert tags["git_dirty"] in ("true", "false")
    artifacts = {a.path for a in client.list_artifacts(result.run_id, "git")}
    assert artifacts == ({"git/diff.patch"} if tags["git_dirty"] == "true" else set())
