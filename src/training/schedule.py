"""Learning-rate schedule: the study's linear warmup, then cosine decay toward a floor.

The study's script (ddp_train.py, `load_datasets_and_train`) chains `LinearLR(start_factor=1e-5)`
over the warmup steps and `CosineAnnealingLR(T_max=steps - warmup, eta_min=lr / 10)` with
`SequentialLR`; `lr_factor` is that schedule in closed form, as a fraction of the peak learning
rate, so the floor follows the peak (an lr sweep needs no second override).
"""

from __future__ import annotations

import math

WARMUP_START_FACTOR = 1e-5  # the study's LinearLR(start_factor=...): warmup starts from ~0


def lr_factor(step: int, max_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """The learning rate of optimizer step `step` (0-based), as a fraction of the peak.

    Warmup rises linearly from WARMUP_START_FACTOR at step 0 to 1 at step `warmup_steps`; from there
    the cosine falls toward `min_lr_ratio`, which it would reach one step after the last (the
    study's T_max = max_steps - warmup_steps).
    """
    if step < warmup_steps:
        return WARMUP_START_FACTOR + (1.0 - WARMUP_START_FACTOR) * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr_ratio + 0.5 * (1.0 - min_lr_ratio) * (1.0 + math.cos(math.pi * progress))


def warmup_steps_for(max_steps: int, warmup_fraction: float) -> int:
    """Whole warmup steps, rounded down as the study's `(steps * percent) // 100` (the rounding to
    nine places keeps 0.29 x 100 = 28.999999999999996 at 29)."""
    return math.floor(round(warmup_fraction * max_steps, 9))
