"""A run that cannot fit in its device's memory, refused in a second instead of after its first step.

Not an estimate (`python -m src.preflight` replays a step for that, src/preflight/memory.py): a floor
made of the two terms no training step can do without, each certainly allocated at once:

- the weights, their gradients and AdamW's two moments: 4 x parameters x the parameters' bytes;
- the logits of one micro-batch and their gradient: 2 x micro-batch x seq_len x vocabulary x the
  bytes of the compute dtype (the largest activation of a GPT: `micro_batch_size=100000` asked the
  CPU allocator for 643 GB of logits in its first forward pass).

A floor above the device's whole memory is refused as a `ConfigError`, so nothing is recorded; the
parameters are counted on the meta device, so a model far too large is never built.
"""

from __future__ import annotations

import os

import torch

from src.core.paths import ConfigError
from src.model.gpt import GPTConfig, GPTModel, count_params

STATE_COPIES = 4  # weights, gradients, AdamW's exp_avg and exp_avg_sq
LOGITS_COPIES = 2  # the logits and their gradient
HALF_PRECISION_BYTES = 2  # bf16/fp16 compute (mixed or true)
FULL_PRECISION_BYTES = 4


def parameter_count(cfg: GPTConfig) -> int:
    """The model's parameters, counted without allocating them."""
    with torch.device("meta"):
        return count_params(GPTModel(cfg))


def device_memory_bytes(device_type: str) -> int:
    """All the memory of the run's device: the first CUDA device's, or this machine's RAM."""
    if device_type == "cuda":
        return torch.cuda.get_device_properties(0).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB"


def check_memory_floor(
    cfg: GPTConfig, n_params: int, micro_batch: int, seq_len: int, precision: str, device_type: str
) -> None:
    """Refuse a run whose floor (see the module's docstring) exceeds the device's memory, naming the field."""
    param_bytes = HALF_PRECISION_BYTES if precision == "bf16-true" else FULL_PRECISION_BYTES
    compute_bytes = FULL_PRECISION_BYTES if precision == "32-true" else HALF_PRECISION_BYTES
    state = STATE_COPIES * n_params * param_bytes
    logits = LOGITS_COPIES * micro_batch * seq_len * cfg.vocab_size * compute_bytes
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
            field = f"seq_len={seq_len}" + (" (= model.context_length)" if seq_len == cfg.context_length else "")
        raise ConfigError(
            f"{field}: one step's logits and their gradient alone need {_gib(logits)} (micro-batch {micro_batch} "
            f"x seq_len {seq_len} x {cfg.vocab_size} tokens x {compute_bytes} B x 2), {has}"
        )
    positions = cfg.context_length * cfg.emb_dim
    field = f"model.context_length={cfg.context_length}" if positions * 2 > n_params else "model"
    raise ConfigError(
        f"{field}: the model's {n_params:,} parameters ({positions:,} of them position embeddings) need "
        f"{_gib(state)} for weights, gradients and AdamW's moments, {has}"
    )
