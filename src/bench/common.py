"""What both benchmarks share: devices and dtypes, timing, the machine's name, report writing."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from src.core.paths import ConfigError, compose
from src.tracking.environment import cpu_model

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}
BENCH_DIR = "bench"  # under paths.reports_dir
_malloc = {"tuned": False}  # set by keep_freed_memory, reported by machine_info


def keep_freed_memory() -> bool:
    """Make glibc keep freed buffers for reuse instead of returning them to the OS.

    By default glibc serves large allocations with fresh mmaps (or trims its heap on free), so a
    kernel's output buffer is often new memory whose first touch costs one page fault per 4 KiB:
    on this class of VM that alone can exceed the kernel's run time, and whether it happens
    depends on the allocation history, not on the kernel. Raising the thresholds (as jemalloc
    or tcmalloc would, the usual advice for CPU training) makes timings reflect the kernels.
    Buffers above 32 MiB (glibc's cap) are still mapped afresh. Returns False where unavailable.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    _malloc["tuned"] = bool(
        libc.mallopt(m_mmap_threshold, 32 * 2**20) and libc.mallopt(m_trim_threshold, 2**31 - 1)
    )
    return _malloc["tuned"]


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
        "malloc_keeps_freed_memory": _malloc["tuned"],
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def parse_list(text: str, cast: Callable[[str], Any] = str) -> list[Any]:
    """`"768,1024"` -> `[768, 1024]` with `cast=int`; empty items are ignored."""
    return [cast(item.strip()) for item in text.split(",") if item.strip()]


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def cells(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[list[str]]:
    """Rows of dicts as text cells for `src.core.tables.markdown_table`, the one table writer."""
    return [[fmt(row.get(c)) for c in columns] for row in rows]


def default_out_dir(overrides: Sequence[str] = ()) -> Path:
    """`<paths.reports_dir>/bench` of the training config with these overrides (`paths.root_dir=...`)."""
    return Path(compose(overrides).paths.reports_dir) / BENCH_DIR


def write_report(out_dir: Path, name: str, payload: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """`<out>/<name>.json` and `<out>/<name>.md`; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(markdown + "\n")
    return json_path, md_path
