"""A fast RMSNorm for the CPU, registered as `fast_rmsnorm`.

`nn.RMSNorm` on the CPU runs the composite pow/mean/rsqrt/mul graph, and autograd differentiates
through every node of it: many passes over memory and many allocations, ~10x slower than the
fused `nn.LayerNorm` kernel although RMSNorm does strictly less work. Here the forward and an
analytic backward are two small functions (one reduction plus one elementwise pass each)
compiled by `torch.compile`'s C++ backend into fused loops, behind a `torch.autograd.Function`.

    forward:   rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * w
    backward:  xhat = x * rstd,  g = dy * w
               dx = rstd * (g - xhat * mean(g * xhat))
               dw = sum over rows of dy * xhat

On CUDA the built-in `F.rms_norm` is already a fused kernel (PyTorch >= 2.9) and is used as is;
inside an outer `torch.compile` the plain op is used too, so inductor fuses it with its neighbours.
The module subclasses `nn.RMSNorm`, so its state dict (`weight`) is interchangeable with
`torch_rmsnorm`'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y and the per-row rstd for a 2-D `x`; statistics in fp32 whatever the input dtype."""
    xf = x.float()
    rstd = torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype), rstd


def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dw of RMSNorm for 2-D `dy`, `x`, given the forward's rstd (fp32)."""
    xhat = x.float() * rstd
    dyf = dy.float()
    g = dyf * weight.float()
    # d xhat / d x projects out the component of g along xhat (rstd depends on x).
    dx = rstd * (g - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    dw = (dyf * xhat).sum(dim=0)
    return dx.to(x.dtype), dw.to(weight.dtype)


class _Kernels:
    """The forward/backward pair, compiled on first use; eager if compilation fails.

    Compiling costs seconds once per process (less with inductor's on-disk cache) and once more
    per new dtype; a second row count switches the kernels to dynamic shapes, so a model whose
    norms all share a width compiles once.
    """

    def __init__(self) -> None:
        self.forward: Callable[..., tuple[torch.Tensor, torch.Tensor]] = rms_norm_forward
        self.backward: Callable[..., tuple[torch.Tensor, torch.Tensor]] = rms_norm_backward
        self.compiled = False
        self._tried = False

    def ensure_compiled(self) -> None:
        if self._tried:
            return
        self._tried = True
        try:
            fwd = torch.compile(rms_norm_forward, fullgraph=True)
            bwd = torch.compile(rms_norm_backward, fullgraph=True)
            # Compile now on a tiny input so a missing C++ toolchain surfaces here, not mid-step.
            x = torch.randn(2, 8)
            w = torch.ones(8)
            _, rstd = fwd(x, w, 1e-5)
            bwd(x, x, w, rstd)
        except Exception as exc:  # no compiler, unsupported platform, ...: stay correct, get slower
            warnings.warn(f"fast_rmsnorm: torch.compile failed ({exc!r}); using the eager kernels", stacklevel=2)
            return
        self.forward, self.backward, self.compiled = fwd, bwd, True


KERNELS = _Kernels()


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        x2 = x.reshape(-1, x.shape[-1])
        y, rstd = KERNELS.forward(x2, weight, eps)
        ctx.save_for_backward(x2, weight, rstd)
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x2, weight, rstd = ctx.saved_tensors
        dx, dw = KERNELS.backward(dy.reshape(x2.shape), x2, weight, rstd)
        return dx.view(dy.shape), dw if ctx.needs_input_grad[1] else None, None


def fast_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension with a learnable weight; output in `x.dtype`."""
    if x.is_cuda or torch.compiler.is_compiling():
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    KERNELS.ensure_compiled()
    return _RMSNormFunction.apply(x, weight, eps)


class FastRMSNorm(nn.RMSNorm):
    """`nn.RMSNorm(dim, eps)` with fused CPU kernels; same parameters, same state dict."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__(dim, eps=eps, elementwise_affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_rms_norm(x, self.weight, self.eps)
