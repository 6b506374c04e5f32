"""Checkpoints, resume and pre-emption.

A run's checkpoint folder follows from its identity, `<paths.checkpoints_dir>/<experiment>/<run
name>-<fingerprint>/`, so a re-run sweep finds it without being told. Besides Lightning's state a
checkpoint carries the `RunTracking` callback's state (the MLflow run id, the training time so far,
the run's identity): `ckpt_path=last` continues the same MLflow run with the same data order (see
`ResumableRankSampler`), and a checkpoint is checked against the config before any run is touched.
SIGTERM (SLURM pre-emption, `scancel`, a spot instance going away) finishes the current step,
saves `last.ckpt` and exits cleanly, so a requeued job resumes instead of starting over.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from src.tracking.identity import LAST, CheckpointSpec


class SaveOnSigterm(L.Callback):
    """On SIGTERM Lightning stops after the current batch; save the state before teardown."""

    def __init__(self, dirpath: str | Path | None) -> None:
        self.dirpath = Path(dirpath) if dirpath else None
        self.saved: Path | None = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and self.dirpath is not None:
            self.saved = self.dirpath / LAST
            trainer.save_checkpoint(self.saved, weights_only=False)  # all of it: the resume reads it


def periodic_checkpoint(spec: CheckpointSpec) -> ModelCheckpoint | None:
    """Periodic `last.ckpt`, when enabled."""
    if not spec.enabled:
        return None
    return ModelCheckpoint(
        dirpath=spec.folder,
        every_n_train_steps=spec.every_n_steps,
        save_top_k=0,  # keep only last.ckpt: a 163M model with AdamW state is ~2 GB per file
        save_last=True,
        enable_version_counter=False,
    )
