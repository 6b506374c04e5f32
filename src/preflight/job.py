"""One job inspected: its config composed as training composes it, then every estimate and check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from omegaconf import DictConfig

from src.core.budget import Budget, resolve_budget
from src.core.devices import uses_cuda
from src.core.paths import ConfigError, compose, without_hydra
from src.core.schema import ScoredWeights
from src.model.gpt import GPTModel, ModelStats, model_stats
from src.preflight.cards import Card, SettingError, card_for
from src.preflight.checks import (
    FAIL,
    Finding,
    check_checkpoints,
    check_data,
    check_memory,
    check_tracking,
    checkpoint_bytes,
    disk_of,
)
from src.preflight.cost import TimeEstimate, estimate_time, jobs_at_once
from src.preflight.memory import MemoryEstimate, estimate_memory, parameter_bytes
from src.tracking.identity import checkpoint_folder
from src.training.run_spec import validate


@dataclass
class JobReport:
    overrides: list[str]
    name: str
    cfg: DictConfig | None = None
    stats: ModelStats | None = None
    budget: Budget | None = None
    devices: int = 1
    at_once: int = 1  # jobs of the sweep running side by side (cost.jobs_at_once)
    card: Card | None = None
    memory: MemoryEstimate | None = None
    time: TimeEstimate | None = None
    findings: dict[str, Finding] = field(default_factory=dict)

    @property
    def failures(self) -> list[str]:
        return [f.reason or name for name, f in self.findings.items() if f.status == FAIL]


class CheckpointLedger:
    """Checkpoint bytes the jobs so far will leave on each disk: the sweep fills it job by job."""

    def __init__(self) -> None:
        self.kept: dict[int, int] = {}

    def need(self, folder_disk: int, one_checkpoint: int) -> int:
        """Bytes this job needs free: the earlier jobs' checkpoints on this disk, its own, and one
        more while its last.ckpt is rewritten."""
        self.kept[folder_disk] = self.kept.get(folder_disk, 0) + one_checkpoint
        return self.kept[folder_disk] + one_checkpoint


def compose_job(overrides: Sequence[str]) -> tuple[DictConfig, int]:
    """The job's config as training sees it (without the `hydra` node), and how many jobs run at once."""
    try:
        cfg = compose(list(overrides), with_hydra=True)
    except Exception as err:  # Hydra's composition errors name the override and the valid options
        raise ConfigError(" ".join(str(err).split())) from err
    at_once = jobs_at_once(cfg)
    # `hydra` holds run-time values (the job number) that resolve only inside a run; a norm YAML of
    # the user's takes its name from it first
    return without_hydra(cfg), at_once


def inspect_job(overrides: Sequence[str], ledger: CheckpointLedger) -> JobReport:
    """Every estimate and check of one job; a config error stops at the first and is the finding."""
    report = JobReport(list(overrides), name=" ".join(overrides) or "(defaults)")  # until the run name is known
    try:
        _inspect(report, ledger)
    except SettingError:  # the preflight's own setting: the command is refused, not the job
        raise
    except ConfigError as err:
        report.findings["config"] = Finding.failed("invalid", str(err))
    return report


def _inspect(report: JobReport, ledger: CheckpointLedger) -> None:
    cfg, report.at_once = compose_job(report.overrides)
    report.cfg = cfg
    report.name = str(cfg.run_name)
    model_cfg = validate(cfg)
    with torch.device("meta"):  # shapes only: the parameter count without allocating the model
        report.stats = model_stats(GPTModel(model_cfg))
    report.devices = int(cfg.cluster.devices * cfg.cluster.num_nodes)
    report.budget = budget = resolve_budget(cfg.optim, cfg.seq_len, report.devices, report.stats.n_params)
    on_gpu = uses_cuda(cfg)
    report.card = card = card_for(cfg, on_gpu)
    precision = str(cfg.precision.lightning)
    ddp = report.devices > 1 and "ddp" in str(cfg.cluster.strategy)
    report.memory = estimate_memory(model_cfg, int(cfg.optim.micro_batch_size), int(cfg.seq_len), precision, ddp)
    # A CPU's memory is shared by the job's DDP ranks on this machine and by a pool's other workers.
    sharing = 1 if on_gpu else int(cfg.cluster.devices) * int(cfg.cluster.get("workers", 1))
    report.findings["memory"] = check_memory(cfg, report.memory, card, report.devices, sharing)
    report.time = estimate_time(cfg, budget, report.stats.flops_per_token, card)
    report.findings["data"] = check_data(cfg, budget)
    report.findings["store"] = check_tracking(cfg)
    folder = checkpoint_folder(cfg)
    kept = cfg.test_weights == ScoredWeights.BEST_TRAIN_LOSS
    needed = ledger.need(disk_of(folder), checkpoint_bytes(parameter_bytes(model_cfg, precision), kept)) if cfg.checkpoint.enabled else 0
    report.findings["checkpoints"] = check_checkpoints(cfg, folder, needed)
