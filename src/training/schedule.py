"""Learning-rate schedule: linear warmup, then cosine decay to a floor."""

from __future__ import annotations

import math


def warmup_cosine(step: int, max_steps: int, warmup_steps: int, lr: float, min_lr: float) -> float:
    """The learning rate for optimizer step `step` (0-based).

    Warmup rises linearly to `lr` at the end of step `warmup_steps - 1`; from there the cosine falls
    to `min_lr`, reached at the last step `max_steps - 1`.
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    decay_steps = max(1, max_steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def warmup_steps_for(max_steps: int, warmup_fraction: float) -> int:
    return int(round(warmup_fraction * max_steps))
