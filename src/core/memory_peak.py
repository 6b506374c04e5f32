"""A job's own peak resident memory on the CPU.

`getrusage`'s maximum resident set size is the process's peak since it started: in a sequential
multirun, where jobs share one process, it climbs in job order and is no job's own. Linux lets a
process reset its high-water mark (`echo 5 > /proc/self/clear_refs`, since Linux 4.0) and read it
back (`VmHWM` in /proc/self/status): reset as a job's fit starts, it is that job's peak. Where the
reset is refused (another OS, a locked-down /proc), only the process's running peak can be had, and
it is recorded under its own name (`process_peak_memory_mb`), never as the job's.
"""

from __future__ import annotations

import contextlib
import functools
import resource
from collections.abc import Iterator
from pathlib import Path

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
JOB_PEAK = "peak_memory_mb"  # the job's own peak (on a GPU: torch's peak allocated on its device)
PROCESS_PEAK = "process_peak_memory_mb"  # the process's peak so far, where a job's own cannot be had


def reset_peak() -> bool:
    """Start this process's peak resident size again from its current size; False where refused."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return high_water_mb() is not None


def high_water_mb() -> float | None:
    """The peak resident size since the last reset (Linux's VmHWM, in MiB), or None where unknown."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_peak_mb() -> float:
    """The process's peak resident size since it started (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextlib.contextmanager
def collection_held(set_aside: bool = False) -> Iterator[None]:
    """No garbage collection while a job's heavy modules load (torch, Lightning, MLflow's store: ~1
    million objects made, few of them garbage), then one collection of what they left. Python collects
    its oldest generation each time the long-lived objects grow by a quarter, so an import that big is
    scanned whole again and again: measured (those imports in a fresh process, the 2-core VM, quiet),
    4.9-5.4 s of CPU collected as it goes, 3.7-3.9 s held, and 0.4 s for the one collection after
    (0.90-0.95 s on an AMD EPYC VM: ~1,030,000 objects scanned), which frees what the imports left in
    cycles (13,000-14,400 objects, ~8 MB) as the collections during them would have. `set_aside`: the
    block made only imports, which live as long as the process: they are taken out of every later
    collection too. Where collection is already off (a caller holding it), it is left as it is."""
    import gc

    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(1)  # everything made while held is in the young generations: one scan of it
        if set_aside:
            gc.freeze()
        gc.enable()


@functools.cache  # once per process: its first job does it
def set_imports_aside() -> None:
    """Take what the process imported (torch, Lightning, MLflow, Hydra: ~680,000 objects by the first
    job's fit) out of every later collection, once per process, as its first job starts its own work
    (a single run's too: its fit's full collections scan its own objects alone). Without it that job's
    `release_garbage` scanned them all to free its own few thousand: measured (a 10-job sweep of the
    bench's tiny jobs, the 2-core VM), 287 ms of CPU, then 3 ms, and ~1 ms for each later job either
    way. The young generations are collected first (under a millisecond); what older garbage is left
    then stays for the process's life, once (measured: 30 objects; a full collection there took 322 ms
    to find them). Called after the job's imports and before it makes anything of its own: set aside
    with them, a first job's run (a callback that comes to hold its Trainer) would stay for good."""
    import gc

    gc.collect(1)
    gc.freeze()


def release_garbage() -> None:
    """Free what the job left in reference cycles (its Trainer, module, data and their tensors) before
    the next job of the same process starts. Python's full collection waits until the long-lived
    objects grow by a quarter: measured (8 tiny jobs of one sweep, the 2-core VM at load ~7-10), the
    process grew ~47 MB a job (peaks 792 -> 1,120 MB); collected, frozen and trimmed at each job's end,
    the jobs' own peaks were 751-766 MB."""
    import gc

    gc.collect()
    # What survived is long-lived (modules, caches, the store's client): frozen out of later
    # collections, so each job's collection scans its own objects, not the ~500,000 of the imports
    # (a full scan took ~0.85 s on the 2-core VM under load). Frozen objects are still freed by
    # reference counting; only a cycle among them would stay.
    gc.freeze()
    _trim_heap()


def _trim_heap() -> None:
    """Hand the heap's freed pages back to the OS (glibc's malloc_trim): without it, what the job
    freed stays resident, and the next job's peak starts from it."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols: the C library it runs on
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl): nothing to trim
        return
