"""`test_weights=best_train_loss`: the test loss scores the weights the study's script would have kept.

The study's loop (ddp_train.py `train`) closes an interval at every step index that is a multiple of
its `checkpoint_interval` (617 of its 33,165 steps), and at its last step; each checkpoint records the
mean training loss of the steps since the one before, and the checkpoint whose mean is the lowest so
far becomes `best`, the weights its test script scores. `BestTrainLoss` keeps the same rule, with the
interval the same share of this run's steps (`interval_steps`), and hands the kept weights to the test.

The mean is over optimizer steps, each step's loss the mean of its micro-batches on all ranks; the
study's is over its rank 0's micro-batches, the same number on one process. The kept weights travel
in the run's checkpoints (the callback's state), so a resumed run scores what an uninterrupted one
would have.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch

# The study's checkpoint interval and the optimizer steps of the run it was set for (its train.json
# `checkpoint_interval`; 3,260,190,720 tokens in steps of 96 x 1,024).
STUDY_INTERVAL, STUDY_STEPS = 617, 33_165


def interval_steps(max_steps: int) -> int:
    """The study's interval as the same share of a run of `max_steps` steps (617 at its 33,165), at least one step."""
    return max(1, round(max_steps * STUDY_INTERVAL / STUDY_STEPS))


def closes_interval(step: int, interval: int, max_steps: int) -> bool:
    """Whether the study's loop checkpoints after step index `step` (0-based, as its `global_step`)."""
    return step % interval == 0 or step == max_steps - 1


class BestTrainLoss(L.Callback):
    """Keeps the weights of the interval with the lowest mean training loss and loads them for the test."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.interval = interval_steps(max_steps)
        self.best_loss: float | None = None
        self.best_step: int | None = None  # optimizer steps done when the kept weights were taken (1-based)
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._losses: list[float] = []  # the open interval's step losses
        self._seen = 0  # optimizer steps already booked

    @property
    def state_key(self) -> str:
        return "BestTrainLoss"

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        done = trainer.global_step
        if done == self._seen:
            return  # mid-accumulation: no optimizer step yet
        self._seen = done
        self._losses.append(float(pl_module.last_train_loss))  # type: ignore[arg-type]
        if not closes_interval(done - 1, self.interval, self.max_steps):
            return
        mean = sum(self._losses) / len(self._losses)
        self._losses = []
        if math.isfinite(mean) and (self.best_loss is None or mean < self.best_loss):  # strictly lower, as the study's
            self.best_loss, self.best_step = mean, done
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in pl_module.model.state_dict().items()}

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.best_weights is not None:
            pl_module.model.load_state_dict(self.best_weights)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_loss": self.best_loss,
            "best_step": self.best_step,
            "best_weights": self.best_weights,
            "losses": list(self._losses),
            "seen": self._seen,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_loss, self.best_step = state_dict["best_loss"], state_dict["best_step"]
        self.best_weights, self._losses, self._seen = state_dict["best_weights"], list(state_dict["losses"]), state_dict["seen"]
