"""Checkpoints, resume and pre-emption.

A checkpoint carries, besides Lightning's state, the MLflow run id and the training time so far:
`ckpt_path=last` continues the same MLflow run with the same data order (see
`ResumableRankSampler`) and the study's training-time clock keeps counting from where it stopped.
SIGTERM (SLURM pre-emption, `scancel`, a spot instance going away) finishes the current step,
saves `last.ckpt` and exits cleanly, so a requeued job resumes instead of starting over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from src.paths import ConfigError

LAST = "last.ckpt"
STATE_KEY = "normsweep"  # our entry in the checkpoint dict


def resolve_ckpt_path(cfg: DictConfig) -> Path | None:
    """The checkpoint to resume from: `ckpt_path=last` / `resume=true` mean this run's last.ckpt."""
    wanted = cfg.get("ckpt_path")
    if cfg.get("resume") and wanted is None:
        wanted = "last"
    if wanted is None:
        return None
    path = Path(cfg.checkpoint.dir) / LAST if wanted == "last" else Path(wanted)
    if not path.is_file():
        raise ConfigError(f"ckpt_path: no checkpoint at {path} (run with checkpoint.enabled=true to write one)")
    return path


def read_mlflow_run_id(path: Path) -> str | None:
    """The MLflow run a checkpoint belongs to (None if it was trained without tracking)."""
    # mmap: only the small entry we read leaves the disk, not gigabytes of optimizer state.
    ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return get_state(ckpt).get("mlflow_run_id")


class SaveOnSigterm(L.Callback):
    """On SIGTERM Lightning stops after the current batch; save the state before teardown."""

    def __init__(self, dirpath: str | Path | None) -> None:
        self.dirpath = Path(dirpath) if dirpath else None
        self.saved: Path | None = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and self.dirpath is not None:
            self.saved = self.dirpath / LAST
            trainer.save_checkpoint(self.saved)


def checkpoint_callbacks(cfg: DictConfig) -> list[L.Callback]:
    """Periodic `last.ckpt` (when enabled) and the SIGTERM save."""
    ck = cfg.checkpoint
    if not ck.enabled:
        return [SaveOnSigterm(None)]
    periodic = ModelCheckpoint(
        dirpath=ck.dir,
        every_n_train_steps=ck.every_n_steps,
        save_top_k=0,  # keep only last.ckpt: a 163M model with AdamW state is ~2 GB per file
        save_last=True,
        enable_version_counter=False,
    )
    return [periodic, SaveOnSigterm(ck.dir)]


def add_state(checkpoint: dict[str, Any], state: dict[str, Any]) -> None:
    checkpoint[STATE_KEY] = state


def get_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    return checkpoint.get(STATE_KEY, {})
