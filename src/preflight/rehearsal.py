"""The dress rehearsal: real optimizer steps of a job on this machine, measured against the estimate.

The job's exact model (full size, its context length), its AdamW, schedule, clipping, precision and
compile setting run `preflight.steps` optimizer steps of the training step the benchmarks use
(`src.training.steps.TrainStep`) on random tokens, with the micro-batch reduced to what fits here. A
precision this device cannot run at speed is replaced: fp16 with loss scaling is CUDA-only, and a
CPU without native bf16 (AVX512-BF16 or AMX) emulates bf16 matmuls far slower than fp32 (measured
here, AVX2: one GPT-2 small step did not finish in 15 minutes), so such a CPU rehearses 16-bit runs
in fp32, and the estimate it is compared with is made for fp32 too.

Measured peak memory:
- CUDA: `torch.cuda.max_memory_allocated` after resetting the peak, minus what was allocated
  before the model was built: the tensors' bytes, as the estimate counts them.
- CPU: torch keeps no allocator statistics on the CPU, so the process's peak resident set size is
  used: the kernel's high-water mark (`VmHWM`, reset through `/proc/self/clear_refs` so that each
  job of a sweep gets its own) minus the resident size before the model was built, after returning
  freed heap memory to the system (`malloc_trim`). It includes what tensors do not: allocator
  rounding, huge-page alignment and Python objects, so it reads a little above the tensor bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from src.core.budget import Budget
from src.core.devices import configure_matmul_precision
from src.model.gpt import GPTConfig, GPTModel
from src.preflight.memory import MemoryEstimate, estimate_memory
from src.training.lit_module import GPTLitModule
from src.training.steps import TrainStep, random_batches

NATIVE_BF16_CPUS = ("AVX512_BF16", "AMX")  # torch.backends.cpu.get_cpu_capability() values with bf16 matmuls
STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class Rehearsal:
    device: str
    precision: str
    micro_batch: int
    steps: int
    seconds_per_step: float
    measured_bytes: int
    estimate: MemoryEstimate
    final_loss: float

    @property
    def ratio(self) -> float:
        """Estimate ÷ measured: above 1 the estimate was generous, below 1 it fell short."""
        return self.estimate.total / max(self.measured_bytes, 1)


def _status_kib(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_cpu_peak() -> int:
    """Return freed heap to the system, reset the peak RSS, and give the resident bytes now."""
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    return (_status_kib("VmRSS") or 0) * 1024


def _cpu_peak() -> int:
    hwm = _status_kib("VmHWM")
    # ru_maxrss never resets: a fallback that only overstates (the process's peak so far)
    return (hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def rehearsal_device(cfg: DictConfig) -> torch.device:
    """The job's GPU when this machine has one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() and cfg.cluster.accelerator != "cpu" else "cpu")


def available_bytes(cfg: DictConfig) -> int:
    """Memory the rehearsal may use: the GPU's free memory, or the CPU's available memory (MemAvailable)."""
    if rehearsal_device(cfg).type == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def rehearsal_precision(precision: str, device: torch.device) -> str:
    """The run's precision where this device runs it at speed; else the CPU's nearest."""
    if device.type != "cpu" or precision == "32-true":
        return precision
    if not any(c in torch.backends.cpu.get_cpu_capability() for c in NATIVE_BF16_CPUS):
        return "32-true"
    return "bf16-mixed" if precision == "16-mixed" else precision  # fp16 with loss scaling is CUDA-only


def rehearse(cfg: DictConfig, model_cfg: GPTConfig, budget: Budget, micro_batch: int, steps: int) -> Rehearsal:
    """Run `steps` optimizer steps of the job `cfg` with `micro_batch` sequences on this machine."""
    device = rehearsal_device(cfg)
    precision = rehearsal_precision(str(cfg.precision.lightning), device)
    run_cfg = OmegaConf.merge(cfg, {"precision": {"lightning": precision}})
    configure_matmul_precision(cfg.precision.matmul_precision)
    estimate = estimate_memory(model_cfg, micro_batch, cfg.seq_len, precision)
    batches = random_batches(model_cfg, cfg.seq_len, micro_batch, steps, seed=cfg.seed)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _reset_cpu_peak()
    torch.manual_seed(cfg.seed)
    # The real schedule's first steps: the run's length, one micro-batch per step on one device.
    step_budget = Budget(budget.max_steps, 1, micro_batch, micro_batch * cfg.seq_len, budget.total_tokens)
    train_step = TrainStep(GPTLitModule(GPTModel(model_cfg), cfg.optim, step_budget), run_cfg, device)
    started = time.perf_counter()
    loss = float("nan")
    for x, y in batches:
        loss = train_step(x, y)
    seconds = (time.perf_counter() - started) / steps
    if device.type == "cuda":
        measured = torch.cuda.max_memory_allocated(device) - before
    else:
        measured = _cpu_peak() - before
    del train_step
    gc.collect()
    return Rehearsal(device.type, precision, micro_batch, steps, seconds, measured, estimate, loss)
