"""Stop a run at its first non-finite loss or gradient norm (under a loss scaler: its loss).

A diverged run is a result (the study's no-norm model went NaN by step 530), not a crash: the
callback stops training at once and records where, and the training job reports it as
`outcome=diverged` and lets the sweep go on.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch


class DivergenceMonitor(L.Callback):
    def __init__(self) -> None:
        self.diverged_at_step: int | None = None
        self.last_finite_loss: float | None = None
        # The step of the first validation whose loss was not finite (training goes on: its own loss
        # is finite); the run then ends `eval not finite`, not finished (src/training/run_life.py).
        self.val_not_finite_at_step: int | None = None

    @property
    def diverged(self) -> bool:
        return self.diverged_at_step is not None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the module's epoch end has booked the loss (callbacks' epoch-end hooks run before it).
        value = trainer.callback_metrics.get("val/val_loss")
        if trainer.sanity_checking or value is None or self.val_not_finite_at_step is not None:
            return
        if not math.isfinite(float(value)):
            self.val_not_finite_at_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # The module books an optimizer step's loss as the step ends (before this hook): the latest
        # step's loss, kept while finite.
        latest = getattr(pl_module, "last_train_loss", None)
        if latest is not None and math.isfinite(latest):
            self.last_finite_loss = latest
        # This micro-batch's loss and the latest pre-clip gradient norm: a NaN stops within one step.
        # Under a loss scaler (fp16) a non-finite gradient is the scaled gradients' overflow, which the
        # scaler answers by skipping the step and halving its scale (as in the study's script): there
        # only the loss says the model diverged.
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        scaled = getattr(trainer.precision_plugin, "scaler", None) is not None
        grad_norm = None if scaled else getattr(pl_module, "last_grad_norm", None)
        values = [float(v) for v in (loss, grad_norm) if isinstance(v, torch.Tensor)]
        if all(math.isfinite(v) for v in values):
            return
        accum = trainer.accumulate_grad_batches
        # global_step counts finished optimizer steps; report the failing step, 1-based.
        self.diverged_at_step = trainer.global_step + (0 if (batch_idx + 1) % accum == 0 else 1)
        trainer.should_stop = True
