"""Device checks that must fail before training starts, not in the middle of it."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from src.paths import ConfigError


def uses_cuda(cfg: DictConfig) -> bool:
    """Whether the config's accelerator puts the run on a CUDA device."""
    accelerator = cfg.cluster.accelerator
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def check_device(cfg: DictConfig) -> None:
    """Refuse an accelerator or precision this machine cannot run, naming the field."""
    accelerator = cfg.cluster.accelerator
    precision = cfg.precision.lightning
    on_gpu = uses_cuda(cfg)
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"cluster.accelerator={accelerator!r} but no CUDA device is visible; use cluster=cpu "
            "or install a CUDA build of torch"
        )
    if accelerator in ("gpu", "cuda") and cfg.cluster.devices > torch.cuda.device_count():
        raise ConfigError(
            f"cluster.devices={cfg.cluster.devices} but only {torch.cuda.device_count()} CUDA device(s) are visible"
        )
    if precision.startswith("16") and not on_gpu:
        raise ConfigError(
            f"precision={cfg.precision.name} (fp16 with loss scaling) needs a CUDA GPU; "
            "on the CPU use precision=fp32 or precision=bf16_mixed"
        )
    if precision.startswith("bf16") and on_gpu and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            f"precision={cfg.precision.name}: this GPU has no bf16 support; use precision=fp16_mixed or fp32"
        )


def configure_matmul_precision(level: str) -> None:
    # "high" lets fp32 matmuls use TF32 tensor cores on Ampere and newer; "highest" keeps true fp32.
    torch.set_float32_matmul_precision(level)
