"""Device checks that must fail before training starts, not in the middle of it."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from src.paths import ConfigError


def cuda_accelerator(accelerator: str) -> bool:
    """Whether Lightning's `accelerator` puts the run on a CUDA device."""
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def uses_cuda(cfg: DictConfig) -> bool:
    """Whether the config's accelerator puts the run on a CUDA device."""
    return cuda_accelerator(cfg.cluster.accelerator)


@dataclass(frozen=True)
class DeviceSpec:
    """The devices a run asks for (the `cluster` and `precision` groups)."""

    accelerator: str
    devices: int
    num_nodes: int
    precision: str  # Lightning's name, e.g. 32-true
    precision_name: str  # the precision group's option, e.g. fp32
    matmul_precision: str

    @classmethod
    def of(cls, cfg: DictConfig) -> DeviceSpec:
        c, p = cfg.cluster, cfg.precision
        return cls(c.accelerator, int(c.devices), int(c.num_nodes), p.lightning, p.name, p.matmul_precision)

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes

    @property
    def device_type(self) -> str:
        """"cuda" or "cpu": the device the run's tensors live on."""
        return "cuda" if cuda_accelerator(self.accelerator) else "cpu"


def check_device(spec: DeviceSpec) -> None:
    """Refuse an accelerator or precision this machine cannot run, naming the field."""
    accelerator, precision = spec.accelerator, spec.precision
    on_gpu = cuda_accelerator(accelerator)
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"cluster.accelerator={accelerator!r} but no CUDA device is visible; use cluster=cpu "
            "or install a CUDA build of torch"
        )
    if accelerator in ("gpu", "cuda") and spec.devices > torch.cuda.device_count():
        raise ConfigError(
            f"cluster.devices={spec.devices} but only {torch.cuda.device_count()} CUDA device(s) are visible"
        )
    if precision.startswith("16") and not on_gpu:
        raise ConfigError(
            f"precision={spec.precision_name} (fp16 with loss scaling) needs a CUDA GPU; "
            "on the CPU use precision=fp32 or precision=bf16_mixed"
        )
    if precision.startswith("bf16") and on_gpu and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            f"precision={spec.precision_name}: this GPU has no bf16 support; use precision=fp16_mixed or fp32"
        )


def configure_matmul_precision(level: str) -> None:
    # "high" lets fp32 matmuls use TF32 tensor cores on Ampere and newer; "highest" keeps true fp32.
    torch.set_float32_matmul_precision(level)
