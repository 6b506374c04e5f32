"""Peak memory per device of a training step, estimated without allocating it.

The model: one forward and backward pass of the job's exact model, micro-batch, context length and
autocast dtype is replayed on fake tensors (`FakeTensorMode`: shapes and dtypes, no storage), and
torch's `MemTracker` follows every tensor's lifetime through it, as the caching allocator would see
them: parameters, the activations autograd saves for backward, temporaries (the gradient of the
logits is the largest) and gradients. The peak of that pass is the peak of a training step once the
optimizer holds its state, so AdamW's two moments (the parameters' size and dtype) are added to it.
Autocast's cached low-precision copies of the weights count as activations, as they do on a device.

What it leaves out: the CUDA context (~0.5 GiB, outside `max_memory_allocated`), allocator rounding
and fragmentation (`preflight.memory_headroom` leaves room for both), the optimizer step's own
temporaries (smaller than the backward peak for these models), and DDP's gradient buckets (one
more copy of the gradients with `strategy: ddp`, added below). Without CUDA the pass is replayed
with the CPU's autocast in the run's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from src.core.patches import PEAK_INSTEAD, PEAK_PATCH, TORCH_MEM_WRITTEN_FOR, patchable
from src.model.gpt import GPTConfig, GPTModel

# Lightning precision -> (autocast dtype or None, parameter dtype)
PRECISIONS: dict[str, tuple[torch.dtype | None, torch.dtype]] = {
    "32-true": (None, torch.float32),
    "bf16-mixed": (torch.bfloat16, torch.float32),
    "16-mixed": (torch.float16, torch.float32),
    "bf16-true": (None, torch.bfloat16),
}
ADAM_MOMENTS = 2  # exp_avg and exp_avg_sq, each the size and dtype of the parameters


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device at the peak of a training step."""

    params: int
    grads: int  # live at the peak (the backward pass frees activations as it makes gradients)
    optimizer: int
    activations: int  # saved for backward, autocast's weight copies included
    temporaries: int  # e.g. the gradient of the logits
    ddp_buckets: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations + self.temporaries + self.ddp_buckets


def simulation_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


_PEAKS: dict[str, dict[str, int]] = {}  # jobs that differ only in seed (or names) replay once


def _forward_backward_peak(cfg: GPTConfig, micro_batch: int, seq_len: int, precision: str, device: str) -> dict[str, int]:
    """Bytes by kind at the peak of one fake forward + backward pass."""
    key = repr((cfg, cfg.norm_options, micro_batch, seq_len, precision, device))
    if key not in _PEAKS:
        try:
            _PEAKS[key] = _replay(cfg, micro_batch, seq_len, precision, device)
        except RuntimeError:
            if device == "cpu":
                raise
            # A fake CUDA op without a meta kernel: the CPU's autocast is the next best replay.
            _PEAKS[key] = _replay(cfg, micro_batch, seq_len, precision, "cpu")
    return _PEAKS[key]


def tracker_class() -> type:
    """torch's MemTracker, with its per-module peak walk left out where the torch it was written for is
    installed (src/core/patches.py; on another, or NORMSWEEP_UNPATCHED set, the class as it ships)."""
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker

    if not patchable(PEAK_PATCH, TORCH_MEM_WRITTEN_FOR, PEAK_INSTEAD):
        return MemTracker

    class PeakTracker(MemTracker):
        """MemTracker without its per-module peaks: after every op it walks every module seen so far
        (two thirds of a GPT-2 small replay's time); the process-wide peak is all we read."""

        def _update_peak_stats(self, peak_state: object) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap[_TOTAL_KEY]:
                    self._peak_mem[dev] = snap[_TOTAL_KEY]
                    self._peak_mem_snap[dev] = dict(snap)

    return PeakTracker


def _replay(cfg: GPTConfig, micro_batch: int, seq_len: int, precision: str, device: str) -> dict[str, int]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import _MemRefType

    PeakTracker = tracker_class()  # noqa: N806 - a class
    autocast, param_dtype = PRECISIONS[precision]
    default_dtype = torch.get_default_dtype()
    with FakeTensorMode(), torch.device(device):
        torch.set_default_dtype(param_dtype)  # bf16-true: parameters born in bf16 (fake tensors cannot be cast in place)
        try:
            model = GPTModel(cfg)
        finally:
            torch.set_default_dtype(default_dtype)
        tokens = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len))
        tracker = PeakTracker()
        tracker.track_external(model)
        with tracker:
            with torch.autocast(device, dtype=autocast or torch.float32, enabled=autocast is not None):
                # As GPTLitModule._loss computes it, inside autocast.
                loss = F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
            loss.backward()
        peak = tracker.get_tracker_snapshot("peak")
    by_kind = next(iter(peak.values()))  # one device
    kinds = {
        "params": _MemRefType.PARAM,
        "grads": _MemRefType.GRAD,
        "activations": _MemRefType.ACT,
        "temporaries": _MemRefType.TEMP,
    }
    return {name: int(by_kind.get(kind, 0)) for name, kind in kinds.items()} | {
        "other": int(by_kind.get(_MemRefType.BUFFER, 0) + by_kind.get(_MemRefType.OTH, 0))
    }


def estimate_memory(
    cfg: GPTConfig, micro_batch: int, seq_len: int, precision: str, ddp: bool = False
) -> MemoryEstimate:
    """Peak bytes per device of a training step of `cfg` (see the module's docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision.lightning={precision!r}; valid choices: {', '.join(PRECISIONS)}")
    peak = _forward_backward_peak(cfg, micro_batch, seq_len, precision, simulation_device())
    param_bytes = parameter_bytes(cfg, precision)
    return MemoryEstimate(
        params=peak["params"] + peak["other"],
        grads=peak["grads"],
        optimizer=ADAM_MOMENTS * param_bytes,
        activations=peak["activations"],
        temporaries=peak["temporaries"],
        ddp_buckets=param_bytes if ddp else 0,
    )


def parameter_bytes(cfg: GPTConfig, precision: str) -> int:
    """Bytes of the model's parameters (counted on the meta device)."""
    with torch.device("meta"):
        model = GPTModel(cfg)
    itemsize = PRECISIONS[precision][1].itemsize
    return sum(p.numel() for p in model.parameters()) * itemsize


def largest_fitting_micro_batch(estimate_at: int, estimate: MemoryEstimate, budget_bytes: int) -> int:
    """The largest micro-batch whose estimate fits `budget_bytes`, scaling the batch-dependent part
    (activations, temporaries) linearly from the estimate at `estimate_at` sequences: slightly
    pessimistic below it, since autocast's weight copies do not grow with the batch. 0: none fits."""
    fixed = estimate.params + estimate.grads + estimate.optimizer + estimate.ddp_buckets
    per_sequence = (estimate.activations + estimate.temporaries) / estimate_at
    if budget_bytes <= fixed:
        return 0
    return max(0, math.floor((budget_bytes - fixed) / per_sequence)) if per_sequence else estimate_at
