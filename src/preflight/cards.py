"""The device a job's memory and time are weighed against: a common GPU card, or this machine's CPU.

Sources: memory is what `nvidia-smi --query-gpu=memory.total` reports for the card (MiB, so the
figure the CUDA allocator can address before its own context); the peaks per matmul precision are
the datasheets' dense rates of `src.core.devices.PEAK_TFLOPS`, the table the benchmark's MFU reads too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from omegaconf import DictConfig

from src.core.devices import gpu_peak_tflops
from src.core.paths import ConfigError

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class Card:
    name: str
    memory_bytes: int
    gpu: bool  # False: this machine's CPU, whose peak is unknown

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    def peak_tflops(self, matmul: str) -> float | None:
        """The dense peak for a matmul precision ("bf16", "tf32", "fp32"); None on a CPU."""
        return gpu_peak_tflops(self.name, matmul) if self.gpu else None


# key (preflight.gpu) -> (name, memory.total in MiB); the name finds the card's peaks in PEAK_TFLOPS.
CARDS: dict[str, tuple[str, int]] = {
    "a100-40gb": ("A100 40GB", 40_960),
    "a100-80gb": ("A100 80GB", 81_920),
    "h100-80gb": ("H100 SXM 80GB", 81_559),
    "h100-pcie": ("H100 PCIe 80GB", 81_559),
    "h200": ("H200 SXM 141GB", 143_771),
    "l40s": ("L40S 48GB", 46_068),
    "l4": ("L4 24GB", 23_034),
    "a10g": ("A10G 24GB", 23_028),
    "rtx-4090": ("RTX 4090 24GB", 24_564),
}


def host_memory_bytes() -> int:
    """This machine's physical memory: what a CPU job shares with everything else running."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class SettingError(ConfigError):
    """A setting of the preflight itself (the card it assumes), not of the job it checks: the command
    line is wrong (status 2, one `config error:` line), where a job's own fault is its FAIL row."""


def card_for(cfg: DictConfig, on_gpu: bool) -> Card:
    """The card a job of `cfg` runs on (`preflight.gpu`), with `preflight.gpu_memory_gb` applied;
    a CPU job gets this machine's memory and no known peak. The card's key is checked either way:
    a typo is one whatever the cluster."""
    pf = cfg.preflight
    key = str(pf.gpu)
    if key not in CARDS:
        raise SettingError(f"preflight.gpu: {key!r} is not a known card; valid choices: {', '.join(CARDS)}")
    if on_gpu:
        name, mib = CARDS[key]
        card = Card(name, mib * MIB, gpu=True)
    else:
        card = Card("this machine's RAM", host_memory_bytes(), gpu=False)
    if pf.gpu_memory_gb is not None:
        if not pf.gpu_memory_gb > 0:
            raise SettingError(f"preflight.gpu_memory_gb: must be > 0 or null, got {pf.gpu_memory_gb}")
        card = Card(card.name, int(pf.gpu_memory_gb * GIB), card.gpu)
    return card
