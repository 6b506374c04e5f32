"""Which kernels a norm actually ran: the aten ops of one forward and one backward, read by torch.profiler.

A module's name says what it asks for, not what runs: on the CPU (torch 2.13) `nn.RMSNorm` calls
`aten::_fused_rms_norm`, which then runs pow, mean, add, rsqrt and mul one after another, and its
backward is autograd's chain of the same ops; on CUDA the fused RMSNorm falls back to that chain
under bf16 autocast with fp32 weights (torch #167308). So each direction is classified from the
ops that ran, under the run's autocast and `compile`:

    compiled   a torch.compile region ran the work (inductor's generated kernel)
    fused      one kernel did the work: a known fused op, or a custom autograd function, with at
               most one arithmetic op beside it (e.g. summing per-thread weight-gradient partials)
    composite  two or more distinct arithmetic ops (one pass over memory each)
    none       no arithmetic at all (the identity)

A variant whose module names a fused implementation (`FUSED_IMPLEMENTATIONS`) but ran a composite
direction gets a warning line.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

# Modules that stand for a fused kernel (FastRMSNorm subclasses nn.RMSNorm).
FUSED_IMPLEMENTATIONS: tuple[type[nn.Module], ...] = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)
FUSED_OPS = frozenset({
    "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::_fused_rms_norm",
    "aten::_fused_rms_norm_backward", "aten::native_group_norm", "aten::native_group_norm_backward",
})  # fmt: skip
# Ops that move or allocate memory without arithmetic: not evidence of a composite path.
BOOKKEEPING = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty_strided", "aten::zeros",
    "aten::zeros_like", "aten::zero_", "aten::fill_", "aten::ones_like", "aten::resize_", "aten::view",
    "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::as_strided", "aten::expand",
    "aten::contiguous", "aten::clone", "aten::copy_", "aten::to", "aten::_to_copy", "aten::type_as",
    "aten::detach", "aten::alias", "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
    "aten::result_type", "aten::lift_fresh", "aten::slice", "aten::select", "aten::item",
    "aten::_local_scalar_dense", "aten::layer_norm", "aten::rms_norm", "aten::group_norm",
})  # fmt: skip
COMPILED_MARKERS = ("Torch-Compiled Region", "CompiledFunction", "torch_compile", "inductor")
FORWARD, BACKWARD = "normsweep.norm_forward", "normsweep.norm_backward"
KINDS = ("fused", "composite", "compiled", "none")


def _arithmetic(ops: list[str]) -> set[str]:
    return {op for op in ops if op.startswith("aten::") and op not in BOOKKEEPING and op not in FUSED_OPS}


def classify(ops: list[str]) -> str:
    """fused | composite | compiled | none for the op names one direction dispatched (module docstring)."""
    if any(marker in op for op in ops for marker in COMPILED_MARKERS):
        return "compiled"
    arithmetic = _arithmetic(ops)
    if len(arithmetic) >= 2:
        return "composite"
    own_kernel = any(op in FUSED_OPS for op in ops) or any(_is_custom_function(op) for op in ops)
    if own_kernel:
        return "fused"
    return "composite" if arithmetic else "none"


def _is_custom_function(op: str) -> bool:
    """A Python autograd.Function (its forward is recorded under its class name, its backward as
    `<name>Backward`): a kernel of the project's own, not one of autograd's generated nodes."""
    if op.startswith(("aten::", "autograd::", "torch::", "normsweep.", "detach")) or " " in op:
        return False
    return not op.endswith(("Backward0", "Backward1", "Backward2"))


@dataclass(frozen=True)
class Dispatch:
    """The aten ops of one forward and one backward of a norm, and their kinds."""

    forward: tuple[str, ...]
    backward: tuple[str, ...]
    fwd: str  # one of KINDS
    bwd: str
    module: str  # the module's class name
    names_fused: bool  # the module stands for a fused kernel

    def summary(self) -> str:
        return f"fwd={self.fwd} bwd={self.bwd}"

    def warning(self, label: str) -> str | None:
        """One line when a module that names a fused implementation ran a composite direction."""
        composite = [d for d, kind in (("forward", self.fwd), ("backward", self.bwd)) if kind == "composite"]
        if not self.names_fused or not composite:
            return None
        ops = sorted(_arithmetic(list(self.forward if composite[0] == "forward" else self.backward)))
        return (
            f"{label}: {self.module} names a fused kernel but its {' and '.join(composite)} ran a composite path "
            f"({', '.join(ops[:6])}{', ...' if len(ops) > 6 else ''})"
        )

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "summary": self.summary()}


def norm_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The norm modules of a model: those whose own name contains `norm` (norm1, final_norm, q_norm,
    ...), the convention `src.model.gpt` follows and `model_stats` counts by."""
    return [(name, m) for name, m in model.named_modules() if name and "norm" in name.rsplit(".", 1)[-1]]


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """Kineto prints two `USDT: profiler_start/stop` lines to fd 2 per profile: not for a terminal."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def record_dispatch(
    module: nn.Module,
    x: torch.Tensor,
    context: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    compile: bool = False,
) -> Dispatch:
    """Profile one forward (inside `context`, e.g. the run's autocast) and one backward of a copy of
    `module` on `x`; `compile` runs it through torch.compile as a compiled run would (compiled and
    warmed up before the profile)."""
    norm = copy.deepcopy(module)
    run: Callable[[torch.Tensor], torch.Tensor] = torch.compile(norm, dynamic=False) if compile else norm
    x = x.detach().clone().requires_grad_(True)

    def step() -> torch.Tensor:
        with context():
            return run(x)

    dy = torch.randn_like(step(), dtype=torch.float32)  # warm-up (and compile) outside the profile
    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(FORWARD):
            y = step()
        with record_function(BACKWARD):
            y.backward(dy.to(y.dtype))
    events = list(prof.events())
    ranges = {e.name: e.time_range for e in events if e.name in (FORWARD, BACKWARD)}

    def inside(marker: str) -> list[str]:
        r = ranges[marker]
        # Backward nodes may run on autograd's device threads: time, not thread, assigns them.
        return [e.name for e in events if e.name not in ranges and r.start <= e.time_range.start <= r.end]

    forward, backward = inside(FORWARD), inside(BACKWARD)
    return Dispatch(
        forward=tuple(forward),
        backward=tuple(backward),
        fwd=classify(forward),
        bwd=classify(backward),
        module=type(module).__name__,
        names_fused=isinstance(module, FUSED_IMPLEMENTATIONS),
    )
