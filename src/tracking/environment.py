"""What a run ran on: library versions, the device, the host, the world size, and the code's git state.

Two results from different machines or different code must be told apart later, so every run
records these as MLflow tags (`env.*`); the code's state is src.tracking.git's.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from pathlib import Path

import torch

from src.tracking.code import package_version
from src.tracking.tags import DEVICE_TAG, GPU_COUNT_TAG

PACKAGES = {"lightning": "lightning", "hydra": "hydra-core", "mlflow": "mlflow"}  # tag -> distribution


# What cannot change while a process lives (its CPU, host, platform, the versions it imported) is read
# once per process: a sweep's jobs share one, and each job read it again (~2 ms of CPU a job, most of
# it parsing three packages' metadata). The torch thread count and the world size are each job's.


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def physical_cores() -> int | None:
    """Distinct (package, core) pairs in /proc/cpuinfo; None where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    cores, package = set(), None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            package = value.strip()
        elif key == "core id":
            cores.add((package, value.strip()))
    return len(cores) or None


def device_name(device: torch.device | str | None = None) -> str:
    """The GPU's model on CUDA; on the CPU its model with cores, threads and torch's thread count."""
    device = torch.device(device) if device is not None else None
    if (device is None and torch.cuda.is_available()) or (device is not None and device.type == "cuda"):
        return torch.cuda.get_device_name(device)
    cores = physical_cores()
    threads = os.cpu_count()
    return f"{cpu_model()} ({cores or '?'} cores, {threads} threads; torch uses {torch.get_num_threads()})"


@functools.cache
def _versions() -> dict[str, str]:
    """The versions this process runs (an install during a sweep does not change what it imported)."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "env.python": platform.python_version(),
        "env.torch": torch.__version__,
        "env.cuda": torch.version.cuda or "none",
        "env.cudnn": str(cudnn) if cudnn else "none",
        **{f"env.{tag}": package_version(dist) for tag, dist in PACKAGES.items()},
    }


@functools.cache
def _machine() -> dict[str, str]:
    return {"env.host": socket.gethostname(), "env.platform": platform.platform()}


def environment_tags(world_size: int = 1, device: torch.device | str | None = None) -> dict[str, str]:
    """Versions, device, host and world size as `env.*` MLflow tags (strings)."""
    tags = {**_versions(), DEVICE_TAG: device_name(device), **_machine(), "env.world_size": str(world_size)}
    if torch.cuda.is_available():
        tags[GPU_COUNT_TAG] = str(torch.cuda.device_count())
    return tags
