"""Wall time and device-hours of a job, from its FLOPs, its tokens and an assumed utilization.

    seconds = training FLOPs ÷ (devices × peak FLOP/s × MFU)

Training FLOPs are `flops_per_token` (6·N + 12·L·d·T, `src.model.gpt.model_stats`) times the tokens
of the budget; evaluation adds a forward pass (a third of that per token) over every validation
and the test windows. The peak is the card's dense rate for the run's matmuls (`src.core.devices.matmul_kind`):
bf16 for 16-bit runs, TF32 for fp32 runs with `precision.matmul_precision` high or medium, fp32 for
`highest`. A CPU has no peak here: `preflight.peak_tflops` gives one.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from src.core.budget import Budget
from src.core.devices import matmul_kind
from src.preflight.cards import Card, SettingError

FORWARD_SHARE = 1 / 3  # a forward pass: 2N of training's 6N FLOPs per token


@dataclass(frozen=True)
class TimeEstimate:
    seconds: float | None  # None: no peak is known for this device and precision
    devices: int
    peak_tflops: float | None
    mfu: float

    @property
    def device_hours(self) -> float | None:
        return None if self.seconds is None else self.seconds * self.devices / 3600


def peak_tflops(cfg: DictConfig, card: Card) -> float | None:
    """The peak a job's MFU is taken against: `preflight.peak_tflops`, else the card's for the precision."""
    given = cfg.preflight.peak_tflops
    if given is not None:
        if not (isinstance(given, (int, float)) and given > 0):
            raise SettingError(f"preflight.peak_tflops: must be a number > 0 or null, got {given!r}")
        return float(given)
    return card.peak_tflops(matmul_kind(str(cfg.precision.lightning), str(cfg.precision.matmul_precision)))


def eval_tokens(cfg: DictConfig, budget: Budget) -> int:
    """Tokens evaluated over the run: every validation and the test, where their window caps are set."""
    windows = (budget.max_steps // cfg.val_every_n_steps) * (cfg.data.get("val_max_windows") or 0)
    windows += cfg.data.get("test_max_windows") or 0
    return windows * cfg.seq_len


def estimate_time(cfg: DictConfig, budget: Budget, flops_per_token: int, card: Card) -> TimeEstimate:
    mfu = cfg.preflight.mfu
    if not (isinstance(mfu, (int, float)) and 0 < mfu <= 1):
        raise SettingError(f"preflight.mfu: must be in (0, 1], got {mfu!r}")
    devices = int(cfg.cluster.devices * cfg.cluster.num_nodes)
    peak = peak_tflops(cfg, card)
    if peak is None:
        return TimeEstimate(None, devices, None, float(mfu))
    flops = flops_per_token * (budget.total_tokens + FORWARD_SHARE * eval_tokens(cfg, budget))
    return TimeEstimate(flops / (devices * peak * 1e12 * mfu), devices, peak, float(mfu))


def jobs_at_once(cfg: DictConfig) -> int:
    """How many jobs of a sweep run side by side: a pool's workers, a SLURM array's parallelism, else 1."""
    if "workers" in cfg.cluster:
        return int(cfg.cluster.workers)
    parallel = cfg.get("hydra", {}).get("launcher", {}).get("array_parallelism")
    return int(parallel) if parallel else 1
