"""The device a job's memory and time are weighed against: a common GPU card, or this machine's CPU.

Sources: memory is what `nvidia-smi --query-gpu=memory.total` reports for the card (MiB, so the
figure the CUDA allocator can address before its own context); the peak is the dense bf16/fp16
tensor-core rate of NVIDIA's datasheets (their "with sparsity" figures are twice these), the same
figures `src.bench.train.PEAK_TFLOPS` uses for MFU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from omegaconf import DictConfig

from src.paths import ConfigError

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class Card:
    name: str
    memory_bytes: int
    bf16_tflops: float | None  # dense peak; None: unknown (a CPU)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


# key (preflight.gpu) -> (name, memory.total in MiB, dense bf16 TFLOP/s)
CARDS: dict[str, tuple[str, int, float]] = {
    "a100-40gb": ("A100 40GB", 40_960, 312.0),
    "a100-80gb": ("A100 80GB", 81_920, 312.0),
    "h100-80gb": ("H100 SXM 80GB", 81_559, 989.4),
    "h100-pcie": ("H100 PCIe 80GB", 81_559, 756.0),
    "h200": ("H200 SXM 141GB", 143_771, 989.4),
    "l40s": ("L40S 48GB", 46_068, 362.05),
    "l4": ("L4 24GB", 23_034, 121.0),
    "a10g": ("A10G 24GB", 23_028, 125.0),
    "rtx-4090": ("RTX 4090 24GB", 24_564, 165.2),
}


def host_memory_bytes() -> int:
    """This machine's physical memory: what a CPU job shares with everything else running."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def card_for(cfg: DictConfig, on_gpu: bool) -> Card:
    """The card a job of `cfg` runs on (`preflight.gpu`), with `preflight.gpu_memory_gb` applied;
    a CPU job gets this machine's memory and no known peak."""
    pf = cfg.preflight
    if on_gpu:
        key = str(pf.gpu)
        if key not in CARDS:
            raise ConfigError(f"preflight.gpu={key!r} is not a known card; valid choices: {', '.join(CARDS)}")
        name, mib, tflops = CARDS[key]
        card = Card(name, mib * MIB, tflops)
    else:
        card = Card("this machine's RAM", host_memory_bytes(), None)
    if pf.gpu_memory_gb is not None:
        if not pf.gpu_memory_gb > 0:
            raise ConfigError(f"preflight.gpu_memory_gb must be > 0 or null, got {pf.gpu_memory_gb}")
        card = Card(card.name, int(pf.gpu_memory_gb * GIB), card.bf16_tflops)
    return card
