"""Stop a run at its first non-finite loss or gradient norm.

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

    @property
    def diverged(self) -> bool:
        return self.diverged_at_step is not None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        metrics = trainer.callback_metrics
        loss = metrics.get("train/loss")
        grad_norm = metrics.get("train/grad_norm")
        # The loss of this micro-batch is checked at once, so a NaN stops within one step.
        values = [v for v in (outputs["loss"] if isinstance(outputs, dict) else None, loss, grad_norm) if v is not None]
        finite = all(math.isfinite(float(v.detach() if isinstance(v, torch.Tensor) else v)) for v in values)
        if finite:
            if loss is not None:
                self.last_finite_loss = float(loss)
            return
        # global_step counts finished optimizer steps; the failing one is the next (1-based).
        self.diverged_at_step = trainer.global_step if (batch_idx + 1) % _accum(pl_module) == 0 else trainer.global_step + 1
        trainer.should_stop = True


def _accum(pl_module: L.LightningModule) -> int:
    budget = getattr(pl_module, "budget", None)
    return budget.grad_accum if budget is not None else 1
