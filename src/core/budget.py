"""The training budget: steps, accumulation and tokens, derived once from the optim group."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from src.core.paths import ConfigError


@dataclass(frozen=True)
class Budget:
    """How long a run trains: derived once from the optim group and the world size."""

    max_steps: int
    grad_accum: int
    global_batch_size: int  # sequences per optimizer step, all devices together
    tokens_per_step: int
    total_tokens: int


def resolve_budget(optim: Mapping[str, Any], seq_len: int, world_size: int, n_params: int) -> Budget:
    """Steps and accumulation from the optim group.

    With `global_batch_size` set, accumulation is derived so the global batch stays fixed whatever
    the number of devices (96 = 12 x 8 GPUs, or 12 x 1 GPU x 8 accumulation steps). A token budget
    (absolute, or per parameter) overrides `max_steps` and is rounded up to whole steps.
    """
    micro = int(optim["micro_batch_size"])
    if optim.get("global_batch_size"):
        per_pass = micro * world_size
        gbs = int(optim["global_batch_size"])
        if gbs % per_pass:
            raise ConfigError(
                f"optim.global_batch_size={gbs} is not a multiple of "
                f"optim.micro_batch_size x devices = {micro} x {world_size}"
            )
        accum = gbs // per_pass
    else:
        accum = int(optim["grad_accum"])
    global_batch = micro * accum * world_size
    tokens_per_step = global_batch * seq_len
    budget = optim.get("token_budget")
    field = "optim.token_budget"
    if optim.get("tokens_per_param"):
        budget, field = optim["tokens_per_param"] * n_params, "optim.tokens_per_param"
    if budget and budget < tokens_per_step:  # rounded up to one step, it would train many times the budget
        raise ConfigError(
            f"{field}: a budget of {budget:,.0f} tokens is less than one optimizer step's {tokens_per_step:,} "
            f"({global_batch} sequences x seq_len {seq_len}), so the run would train {tokens_per_step:,}: "
            "raise the budget, or lower optim.micro_batch_size / optim.global_batch_size"
        )
    max_steps = math.ceil(budget / tokens_per_step) if budget else int(optim["max_steps"])
    return Budget(max_steps, accum, global_batch, tokens_per_step, max_steps * tokens_per_step)
