"""The normalization layers under study and the one factory that builds them.

Every variant is reached through a string key (what the Hydra `norm/` configs hold), so configs
stay serializable and a sixth variant is one entry in `NORM_REGISTRY` plus one YAML file.
The same explicit `eps` reaches every variant: `nn.RMSNorm(eps=None)` would silently use
`torch.finfo(dtype).eps` (1.2e-7 in fp32) and skew the comparison.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from src.fast_norms import FastRMSNorm

DEFAULT_EPS = 1e-5


class HandLayerNorm(nn.Module):
    """LayerNorm written out: per-vector mean and biased variance, learnable scale and shift."""

    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift

    def extra_repr(self) -> str:
        return f"{self.scale.numel()}, eps={self.eps}"


class HandRMSNorm(nn.Module):
    """RMSNorm written out: x / sqrt(mean(x^2) + eps) * scale; no shift, no mean subtraction."""

    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x / rms * self.scale

    def extra_repr(self) -> str:
        return f"{self.scale.numel()}, eps={self.eps}"


def _identity(dim: int, eps: float) -> nn.Module:
    # `no_norm` keeps the block structure and replaces each norm by a pass-through.
    return nn.Identity()


NormFactory = Callable[[int, float], nn.Module]

# key -> constructor(dim, eps). The keys are the values of `norm.norm_type` in conf/norm/*.yaml.
NORM_REGISTRY: dict[str, NormFactory] = {
    "hand_layernorm": lambda dim, eps: HandLayerNorm(dim, eps=eps),
    "torch_layernorm": lambda dim, eps: nn.LayerNorm(dim, eps=eps, elementwise_affine=True, bias=True),
    "hand_rmsnorm": lambda dim, eps: HandRMSNorm(dim, eps=eps),
    "torch_rmsnorm": lambda dim, eps: nn.RMSNorm(dim, eps=eps, elementwise_affine=True),
    "no_norm": _identity,
    "fast_rmsnorm": lambda dim, eps: FastRMSNorm(dim, eps=eps),
}


def norm_types() -> list[str]:
    """The valid norm keys, in registry order."""
    return list(NORM_REGISTRY)


def check_norm_type(norm_type: str) -> None:
    """Raise a ValueError naming the valid keys when `norm_type` is not one of them."""
    if norm_type not in NORM_REGISTRY:
        raise ValueError(f"unknown norm_type {norm_type!r}; valid choices: {', '.join(NORM_REGISTRY)}")


def make_norm(norm_type: str, dim: int, eps: float = DEFAULT_EPS) -> nn.Module:
    """Build the normalization layer registered under `norm_type` for vectors of width `dim`."""
    check_norm_type(norm_type)
    if eps is None or not eps > 0:
        raise ValueError(f"norm eps must be a positive float, got {eps!r}")
    return NORM_REGISTRY[norm_type](dim, float(eps))
