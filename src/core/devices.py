"""Device checks that must fail before training starts, not in the middle of it, and the datasheet
peaks of the GPUs we know (the one table the benchmark's MFU and preflight's time estimate read).

torch is imported inside the functions that ask it: a config refused before any device is asked
answers without torch's seconds of import."""

from __future__ import annotations

import os
from dataclasses import dataclass

from omegaconf import DictConfig

from src.core.paths import ConfigError


def cuda_accelerator(accelerator: str) -> bool:
    """Whether Lightning's `accelerator` puts the run on a CUDA device."""
    if accelerator != "auto":
        return accelerator in ("gpu", "cuda")
    import torch

    return torch.cuda.is_available()


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
    """Refuse an accelerator or precision this machine cannot run, naming the field. Torch is asked
    only about a GPU: a CPU run's checks answer before it is imported."""
    accelerator, precision = spec.accelerator, spec.precision
    on_gpu = cuda_accelerator(accelerator)
    if on_gpu or accelerator in ("gpu", "cuda"):
        import torch
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"cluster.accelerator={accelerator!r} but no CUDA device is visible; use cluster=cpu "
            "or install a CUDA build of torch"
        )
    if accelerator in ("gpu", "cuda") and spec.devices > torch.cuda.device_count():
        raise ConfigError(
            f"cluster.devices={spec.devices} but only {torch.cuda.device_count()} CUDA device(s) are visible"
        )
    cores = os.cpu_count() or 1
    if not on_gpu and spec.devices > cores:
        raise ConfigError(
            f"cluster.devices={spec.devices} processes on the CPU, but this machine has {cores} cores; "
            f"use cluster.devices={cores} or fewer"
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


# --- the memory floor: a run that cannot fit in its device's memory, refused in a second
# Not an estimate (`python -m src.preflight` replays a step for that, src/preflight/memory.py): a floor
# made of the two terms no training step can do without, each certainly allocated at once:
# - the weights, their gradients and AdamW's two moments: 4 x parameters x the parameters' bytes;
# - the logits of one micro-batch and their gradient: 2 x micro-batch x seq_len x vocabulary x the
#   bytes of the compute dtype (the largest activation of a GPT: `micro_batch_size=100000` asked the
#   CPU allocator for 643 GB of logits in its first forward pass).
# A floor above the device's whole memory is a `ConfigError`, so nothing is recorded; the parameters
# are counted from the model's sizes (src.model.gpt.parameter_count), so a model far too large is never built.
STATE_COPIES = 4  # weights, gradients, AdamW's exp_avg and exp_avg_sq
LOGITS_COPIES = 2  # the logits and their gradient
HALF_PRECISION_BYTES = 2  # bf16/fp16 compute (mixed or true)
FULL_PRECISION_BYTES = 4


@dataclass(frozen=True)
class ModelSize:
    """What the memory floor reads of a model: its parameters and the shapes behind its largest terms."""

    n_params: int
    vocab_size: int
    context_length: int
    emb_dim: int


def device_memory_bytes(device_type: str) -> int:
    """All the memory of the run's device: the first CUDA device's, or this machine's RAM."""
    if device_type == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB"


def check_memory_floor(size: ModelSize, micro_batch: int, seq_len: int, precision: str, device_type: str) -> None:
    """Refuse a run whose floor (see above) exceeds the device's memory, naming the field."""
    n_params, vocab = size.n_params, size.vocab_size
    param_bytes = HALF_PRECISION_BYTES if precision == "bf16-true" else FULL_PRECISION_BYTES
    compute_bytes = FULL_PRECISION_BYTES if precision == "32-true" else HALF_PRECISION_BYTES
    state = STATE_COPIES * n_params * param_bytes
    logits = LOGITS_COPIES * micro_batch * seq_len * vocab * compute_bytes
    total = device_memory_bytes(device_type)
    if state + logits <= total:
        return
    where = "the GPU" if device_type == "cuda" else "this machine"
    has = f"more than the {_gib(total)} {where} has; `python -m src.preflight <overrides>` estimates a step's peak"
    if logits >= state:
        # The larger factor is the one to change (seq_len follows model.context_length by default).
        if micro_batch >= seq_len:
            field = f"optim.micro_batch_size={micro_batch}"
        else:
            field = f"seq_len={seq_len}" + (" (= model.context_length)" if seq_len == size.context_length else "")
        raise ConfigError(
            f"{field}: one step's logits and their gradient alone need {_gib(logits)} (micro-batch {micro_batch} "
            f"x seq_len {seq_len} x {vocab} tokens x {compute_bytes} B x 2), {has}"
        )
    positions = size.context_length * size.emb_dim
    field = f"model.context_length={size.context_length}" if positions * 2 > n_params else "model"
    raise ConfigError(
        f"{field}: the model's {n_params:,} parameters ({positions:,} of them position embeddings) need "
        f"{_gib(state)} for weights, gradients and AdamW's moments, {has}"
    )


def configure_matmul_precision(level: str) -> None:
    import torch
    # "high" lets fp32 matmuls use TF32 tensor cores on Ampere and newer; "highest" keeps true fp32.
    torch.set_float32_matmul_precision(level)


# Dense peak TFLOP/s per matmul precision, from NVIDIA's datasheets (their "with sparsity" figures are
# twice these; e.g. L40S: TF32 183, 366 with sparsity). fp16 tensor cores run at the bf16 rate. Keys
# are matched against torch.cuda.get_device_name() (and preflight's card names), most specific first.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "h200 nvl": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "h200": {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9},  # SXM; same tensor cores as H100 SXM
    "h100 pcie": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.2},
    "h100 nvl": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "h100": {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9},  # SXM (device name "H100 80GB HBM3")
    "a100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},  # SXM and PCIe
    "l40s": {"bf16": 362.05, "tf32": 183.0, "fp32": 91.6},
    "l4": {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "a10g": {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2},  # A10 datasheet; AWS's A10G is the same chip
    "rtx 4090": {"bf16": 165.2, "tf32": 82.6, "fp32": 82.6},  # bf16 with fp32 accumulate
}


def gpu_peak_tflops(device_name: str, matmul: str) -> float | None:
    """Datasheet dense peak for a GPU name and matmul precision ("bf16", "tf32", "fp32"); None if unknown."""
    name = device_name.lower()
    for key, peaks in PEAK_TFLOPS.items():
        if key in name:
            return peaks[matmul]
    return None


def matmul_kind(precision: str, matmul_precision: str) -> str:
    """Which peak applies to a Lightning `precision`: 16-bit autocast (bf16 or fp16) -> bf16; fp32
    with TF32 allowed (`matmul_precision` high or medium) -> tf32; true fp32 -> fp32."""
    if precision.startswith(("bf16", "16")):
        return "bf16"
    return "fp32" if matmul_precision == "highest" else "tf32"
