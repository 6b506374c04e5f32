"""Fused norms: a fast RMSNorm for the CPU (`fast_rmsnorm`) and a compiled Dynamic Tanh (`fast_dyt`).

`nn.RMSNorm` on the CPU runs the composite pow/mean/rsqrt/mul graph, and autograd differentiates
through every node of it: many passes over memory and many allocations, ~10x slower than the
fused `nn.LayerNorm` kernel although RMSNorm does strictly less work. Here a
`torch.autograd.Function` runs an analytic forward and backward:

- fp32 (the training default): native C++ row kernels (`csrc/rms_norm.cpp`, built on first use,
  see `src/model/cpu_kernels.py`), which read each row once per pass like LayerNorm's kernel;
- other dtypes, or where no compiler is available: the same math as two small functions
  compiled by `torch.compile`'s C++ backend into fused loops.

    forward:   ssq = sum(x^2),  rstd = 1 / sqrt(ssq / d + eps),  y = x * rstd * w
    backward:  xhat = x * rstd,  g = dy * w
               dx = rstd * (g - xhat * mean(g * xhat))
               dw = sum over rows of dy * xhat    (per chunk of rows, then over chunks)

On CUDA the built-in `F.rms_norm` is already a fused kernel (PyTorch >= 2.9) and is used as is;
inside an outer `torch.compile` the plain op is used too, so inductor fuses it with its neighbours.
The module subclasses `nn.RMSNorm`, so its state dict (`weight`) is interchangeable with
`torch_rmsnorm`'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from src.model.cpu_kernels import rms_norm_extension


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y and the per-row sum of squares (fp32) for a 2-D `x`; statistics in fp32 whatever the dtype.

    Saving the raw sum rather than rstd matters: with rstd as an output, inductor splits the
    forward into a reduction loop, a row-wise rsqrt loop and an elementwise loop that reads x from
    memory a second time; with the sum, reduction and scaling share one loop over each row.
    """
    xf = x.float()
    ssq = xf.square().sum(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(ssq / x.shape[-1] + eps) * weight.float()).to(x.dtype), ssq


# Rows per partial sum of dw. Summing dw over short chunks of rows, then over chunks, beats one
# column-wise reduction over all rows by ~25% at 4096x768 on the CPU (measured; 8 was the best of
# 1..128). Inductor still reads x and dy twice in the backward, where nn.LayerNorm's kernel
# reads them once and accumulates dw per thread: that pass is the remaining gap to it.
DW_CHUNK_ROWS = 8


def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, ssq: torch.Tensor, eps: float, chunk: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dw of RMSNorm for 2-D `dy`, `x`, given the forward's per-row sum of squares.

    `chunk` must divide the number of rows; dw is summed per chunk of rows, then over chunks.
    """
    d = x.shape[-1]
    rstd = torch.rsqrt(ssq / d + eps).view(-1, chunk, 1)
    xhat = x.float().view(-1, chunk, d) * rstd
    dyf = dy.float().view(-1, chunk, d)
    g = dyf * weight.float()
    # d xhat / d x projects out the component of g along xhat (rstd depends on x).
    dx = rstd * (g - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    dw = (dyf * xhat).sum(dim=1).sum(dim=0)
    return dx.view(x.shape).to(x.dtype), dw.to(weight.dtype)


def dw_chunk(rows: int) -> int:
    """The largest power of two <= DW_CHUNK_ROWS that divides `rows`."""
    chunk = DW_CHUNK_ROWS
    while rows % chunk:
        chunk //= 2
    return chunk


class _Kernels:
    """A forward/backward pair, compiled by inductor; the eager functions if compiling fails.

    Kernels are specialised per (rows, width, dtype): a training run, whose norms all see the same
    shape, compiles each once (seconds, less with inductor's on-disk cache). Past dynamo's
    recompile limit (8 shapes) a function runs eagerly, correct but slower.
    """

    def __init__(self, name: str, forward: Callable[..., Any], backward: Callable[..., Any]) -> None:
        self.name, self.eager = name, (forward, backward)
        self.compiled: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self.failed = False

    def _compile(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        # On first use, not at import: `torch.compile` imports dynamo (seconds), which a process that
        # never runs these norms (every other variant, a refused config) should not pay.
        if self.compiled is None:
            self.compiled = tuple(torch.compile(f, dynamic=False, fullgraph=True) for f in self.eager)  # type: ignore[assignment]
        assert self.compiled is not None
        return self.compiled

    def run(self, name: str, *args: object) -> Any:
        which = ("forward", "backward").index(name)
        if not self.failed:
            try:
                return self._compile()[which](*args)
            except Exception as exc:  # no C++ compiler, unsupported platform, ...: stay correct
                warnings.warn(
                    f"{self.name}: torch.compile failed ({exc!r}); using eager kernels", stacklevel=3
                )
                self.use_eager()
        return self.eager[which](*args)

    def use_eager(self) -> None:
        self.failed = True


KERNELS = _Kernels("fast_rmsnorm", rms_norm_forward, rms_norm_backward)


def _native_kernels(x: torch.Tensor, weight: torch.Tensor) -> ModuleType | None:
    """The C++ kernels for fp32 inputs (the training default), if they build on this machine."""
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        return None
    return rms_norm_extension()


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        native = _native_kernels(x2, weight)
        if native is not None:
            # One read of x per pass, vectorised; saves rstd for the backward.
            y, stat = native.rms_norm_fwd(x2, weight.contiguous(), eps)
        else:
            y, stat = KERNELS.run("forward", x2, weight, eps)  # stat = per-row sum of squares
        ctx.save_for_backward(x2, weight, stat)
        ctx.eps, ctx.native = eps, native
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x2, weight, stat = ctx.saved_tensors
        dy2 = dy.reshape(x2.shape).contiguous()
        if ctx.native is not None:
            dx, dw = ctx.native.rms_norm_bwd(dy2, x2, weight.contiguous(), stat)
        else:
            dx, dw = KERNELS.run("backward", dy2, x2, weight, stat, ctx.eps, dw_chunk(x2.shape[0]))
        return dx.view(dy.shape), dw if ctx.needs_input_grad[1] else None, None


def fast_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension with a learnable weight; output in `x.dtype`."""
    if x.is_cuda or torch.compiler.is_compiling():
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return _RMSNormFunction.apply(x, weight, eps)


class FastRMSNorm(nn.RMSNorm):
    """`nn.RMSNorm(dim, eps)` with fused CPU kernels; same parameters, same state dict."""

    def __init__(self, dim: int, eps: float) -> None:  # eps is explicit: nn.RMSNorm(eps=None) is not 1e-5
        super().__init__(dim, eps=eps, elementwise_affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_rms_norm(x, self.weight, self.eps)


# --- Dynamic Tanh --------------------------------------------------------------------------------
#
#     forward:   y = w * tanh(a * x) + b
#     backward:  t = tanh(a * x),  s = dy * w * (1 - t^2)
#                dx = a * s,  da = sum(s * x),  dw = sum over rows of dy * t,  db = sum over rows of dy
#
# Eager PyTorch runs the forward as four kernels (mul, tanh, mul, add), each a full pass over the
# activations, and autograd saves their intermediates; the compiled pair below makes one pass for
# the forward and one for the backward, saving only x (tanh is recomputed, it is cheap next to a
# memory pass). This is the fused implementation `fast_dyt` is timed with.


def _acc(t: torch.Tensor) -> torch.Tensor:
    """`t` in the accumulation dtype: fp32 for fp32 and narrower types, fp64 stays fp64."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def dyt_forward(x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y for a 2-D `x`, computed in fp32 (fp64 for fp64 inputs) whatever the dtype."""
    y = _acc(weight) * torch.tanh(_acc(alpha) * _acc(x))
    if bias is not None:
        y = y + _acc(bias)
    return y.to(x.dtype)


def dyt_backward(
    dy: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, chunk: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dalpha, dweight and dbias of DyT for 2-D `dy`, `x`; `chunk` rows per partial sum (see DW_CHUNK_ROWS)."""
    d = x.shape[-1]
    a = _acc(alpha)
    xf = _acc(x).view(-1, chunk, d)
    dyf = _acc(dy).view(-1, chunk, d)
    t = torch.tanh(a * xf)
    s = dyf * _acc(weight) * (1 - t * t)
    dx = (a * s).view(x.shape).to(x.dtype)
    dalpha = (s * xf).sum().reshape(1).to(alpha.dtype)
    dw = (dyf * t).sum(dim=1).sum(dim=0).to(weight.dtype)
    db = dyf.sum(dim=1).sum(dim=0).to(weight.dtype)
    return dx, dalpha, dw, db


DYT_KERNELS = _Kernels("fast_dyt", dyt_forward, dyt_backward)


class _DyTFunction(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = DYT_KERNELS.run("forward", x2, alpha, weight, bias)
        ctx.save_for_backward(x2, alpha, weight)
        ctx.has_bias = bias is not None
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x2, alpha, weight = ctx.saved_tensors
        dy2 = dy.reshape(x2.shape).contiguous()
        dx, dalpha, dw, db = DYT_KERNELS.run("backward", dy2, x2, alpha, weight, dw_chunk(x2.shape[0]))
        return dx.view(dy.shape), dalpha, dw, db if ctx.has_bias else None


def fast_dyt(x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Dynamic Tanh over the last dimension; output in `x.dtype`."""
    if torch.compiler.is_compiling():
        # Inside an outer torch.compile the plain ops are fused with their neighbours.
        y = weight * torch.tanh(alpha * x)
        return y if bias is None else y + bias
    return _DyTFunction.apply(x, alpha, weight, bias)
