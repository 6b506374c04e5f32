"""What the kernel and training benchmarks share: devices and dtypes, timing, the machine's name
(their report files and table cells: src/bench/files.py)."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from src.bench.files import malloc_tuned
from src.core.paths import ConfigError
from src.tracking.environment import cpu_model

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def resolve_device(name: str | None) -> torch.device:
    """`cpu`, `cuda` or None (cuda when available, else cpu)."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: requested, but torch.cuda.is_available() is False")
    return device


def supports_dtype(device: torch.device, dtype: torch.dtype) -> bool:
    """bf16 needs Ampere or newer on CUDA; every CPU kernel we call has a bf16 path."""
    if dtype == torch.bfloat16 and device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return True


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    fns: dict[str, Callable[[], object]], device: torch.device, warmup: int, repeats: int
) -> dict[str, list[float]]:
    """Seconds per call of each function: `warmup` untimed calls each, then `repeats` rounds.

    Each round times every function once, so on a shared machine a burst of foreign load hits
    all of them alike and their ratios stay fair. On CUDA each call is bracketed by events and
    read after synchronizing, so the samples are kernel time, not launch time.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
    return samples


def time_fn(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> list[float]:
    """Seconds per call of one function (see `time_interleaved`)."""
    return time_interleaved({"fn": fn}, device, warmup, repeats)["fn"]


def median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples))


def copy_bandwidth(
    device: torch.device, nbytes: int = 256 * 2**20, warmup: int = 2, repeats: int = 10
) -> dict:
    """Achievable memory bandwidth: `copy_` of a large buffer into a preallocated one.

    Counts the bytes read plus the bytes written (2 × size), the same convention as the norm
    figures, so "% of copy" compares like with like.
    """
    n = nbytes // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    t = median(time_fn(lambda: dst.copy_(src), device, warmup, repeats))
    return {"bytes_per_copy": 2 * n * 4, "seconds": t, "gbps": 2 * n * 4 / t / 1e9}


def last_level_cache_bytes(device: torch.device) -> int | None:
    """The largest cache in front of memory: the GPU's L2, or the CPU's highest-level cache (sysfs)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or None
    best: tuple[int, int] | None = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        size = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        best = max(best or (level, size), (level, size))
    return best[1] if best else None


def copy_reference(nbytes: int, device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    """A `copy_` that moves `nbytes` (read + write), for a bandwidth reference of the same size.

    A kernel and its reference must work at the same level of the memory hierarchy: a 12 MB norm
    that fits in cache measured against a 256 MiB copy that streams from DRAM can show > 100%.
    """
    n = max(1, nbytes // 2 // dtype.itemsize)
    src = torch.ones(n, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def machine_info(device: torch.device) -> dict[str, Any]:
    """Enough to name the machine in a report: CPU model and cores, GPU name, library versions."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "malloc_keeps_freed_memory": malloc_tuned(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info
