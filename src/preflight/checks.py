"""The checks a job must pass before it starts: memory, data, tracking store, checkpoint disk.

Each returns a `Finding`: a short cell for the table and, when the job would fail, a one-line
reason that names the config field to change.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from src.core.budget import Budget
from src.core.paths import ConfigError, nearest_existing, unwritable_reason
from src.preflight.cards import GIB, Card, SettingError
from src.preflight.memory import MemoryEstimate, largest_fitting_micro_batch

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    status: str  # OK, WARN or FAIL
    cell: str  # what the table shows
    reason: str | None = None  # for WARN and FAIL: one line naming the field

    @classmethod
    def failed(cls, cell: str, reason: str) -> Finding:
        return cls(FAIL, cell, reason)


def gib(n_bytes: float) -> str:
    """Bytes for a person: GiB with one decimal, MiB below one GiB."""
    return f"{n_bytes / GIB:,.1f} GiB" if n_bytes >= GIB else f"{n_bytes / 2**20:,.0f} MiB"


def check_memory(
    cfg: DictConfig, estimate: MemoryEstimate, card: Card, devices_per_pass: int, sharing: int = 1
) -> Finding:
    """The estimate against the card's memory times `preflight.memory_headroom`; `sharing` processes
    hold one estimate each in that memory (CPU jobs: the DDP ranks and pool workers of one machine)."""
    headroom = cfg.preflight.memory_headroom
    if not (isinstance(headroom, (int, float)) and 0 < headroom <= 1):
        raise SettingError(f"preflight.memory_headroom: must be in (0, 1], got {headroom!r}")
    usable = int(card.memory_bytes * headroom) // sharing
    total = estimate.total * sharing
    processes = f" for {sharing} processes" if sharing > 1 else ""
    cell = f"{gib(total)}{processes} of {gib(card.memory_bytes)} ({total / card.memory_bytes:.0%})"
    if estimate.total <= usable:
        return Finding(OK, cell)
    micro = int(cfg.optim.micro_batch_size)
    fits = largest_fitting_micro_batch(micro, estimate, usable)
    advice = f"at most ~{fits} fits; a smaller one raises the derived accumulation" if fits else "not even 1 fits"
    if cfg.optim.get("global_batch_size") and fits:
        per_pass = int(cfg.optim.global_batch_size) // devices_per_pass
        divisors = [b for b in range(fits, 0, -1) if per_pass % b == 0]
        advice = f"optim.micro_batch_size={divisors[0]} fits and divides {per_pass} (= global batch / devices)"
    return Finding.failed(
        cell,
        f"optim.micro_batch_size={micro}: needs ~{gib(estimate.total)} per device{processes}, more than "
        f"{headroom:.0%} of {gib(card.memory_bytes)} ({card.name}: preflight.gpu, preflight.gpu_memory_gb); {advice}",
    )


def budget_field(cfg: DictConfig) -> str:
    """The optim field that set the run's length."""
    if cfg.optim.get("tokens_per_param"):
        return "optim.tokens_per_param"
    return "optim.token_budget" if cfg.optim.get("token_budget") else "optim.max_steps"


def check_data(cfg: DictConfig, budget: Budget) -> Finding:
    """Prepared or not, tokens available against the budget, the splits' other needs, size on disk."""
    from src.data import build_source, read_meta
    from src.data.cache import is_valid_cache
    from src.training.run_life import run_datamodule
    from src.training.run_spec import TrainSpec

    try:
        source = build_source(cfg.data)
    except (ConfigError, ValueError, FileNotFoundError) as err:  # a glob matching nothing, an unknown source
        return Finding.failed("invalid", str(err) if isinstance(err, ConfigError) else f"data: {err}")
    folder = source.folder(cfg.data.cache_dir)
    if not is_valid_cache(folder, check_hash=False):
        return Finding(
            WARN,
            "not prepared",
            f"data: no token cache at {folder}; training prepares it first (for FineWeb run `python -m src.data` "
            "with the same overrides beforehand)",
        )
    splits = read_meta(folder)["splits"]
    tokens = {split: int(entry["tokens"]) for split, entry in splits.items()}
    size = sum(int(entry["bytes"]) for entry in splits.values())
    cell = f"{tokens.get('train', 0):,} train tokens, {gib(size)}"
    if budget.total_tokens > tokens.get("train", 0):
        return Finding.failed(
            cell,
            f"{budget_field(cfg)}: the run trains {budget.total_tokens:,} tokens but the train split of {folder.name} "
            f"holds {tokens.get('train', 0):,}; lower the budget or prepare more data",
        )
    datamodule = run_datamodule(TrainSpec.of(cfg), budget, cfg.seed)
    try:
        datamodule.check(tokens)  # validation and test windows: the checks training makes once prepared
    except ConfigError as err:
        return Finding.failed(cell, str(err))
    return Finding(OK, cell)


def check_tracking(cfg: DictConfig) -> Finding:
    """The store training checks first: a server answers, a SQLite folder is writable and opens."""
    from src.tracking.store import Store
    from src.tracking.store_uri import redact_uri

    if not cfg.logger.enabled:
        return Finding(OK, "off (logger=none)")
    uri = str(cfg.logger.tracking_uri)
    try:
        Store.connect(uri)
    except ConfigError as err:
        return Finding.failed("unreachable", str(err))
    return Finding(OK, redact_uri(uri) if uri.startswith("http") else "sqlite, writable")


def checkpoint_bytes(param_bytes: int, kept_weights: bool = False) -> int:
    """One last.ckpt: the weights and AdamW's two moments, each the size of the parameters (the
    study's model: 1.96 GB); `kept_weights` (`test_weights=best_train_loss`): a second copy of the
    weights, the ones the test will score (src/training/best_weights.py)."""
    return (4 if kept_weights else 3) * param_bytes


def check_checkpoints(cfg: DictConfig, folder: Path, needed: int) -> Finding:
    """`folder` writable (its nearest existing ancestor: training creates the rest) and `needed`
    bytes free on its file system."""
    if not cfg.checkpoint.enabled:
        return Finding(OK, "off")
    field = "checkpoint.dir" if cfg.checkpoint.get("dir") else "paths.checkpoints_dir"
    if why := unwritable_reason(folder):
        return Finding.failed("not writable", f"{field}: {why}")
    base = nearest_existing(folder)
    free = shutil.disk_usage(base).free
    cell = f"{gib(needed)} needed, {gib(free)} free"
    if needed > free:
        return Finding.failed(
            cell,
            f"{field}: the checkpoints need {gib(needed)} but {base} has {gib(free)} free; point {field} at a larger disk",
        )
    return Finding(OK, cell)


def disk_of(path: Path) -> int:
    """The file system `path` would be written on (its nearest existing ancestor's device)."""
    return os.stat(nearest_existing(path)).st_dev
