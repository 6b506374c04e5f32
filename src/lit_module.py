"""The LightningModule: GPT-2 (norms from the factory), AdamW, warmup-cosine, per-step metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from src.config import Budget
from src.model import GPTModel, model_stats
from src.schedule import warmup_cosine, warmup_steps_for


def param_groups(model: nn.Module, weight_decay: float, decay_norm_and_bias: bool) -> list[dict[str, Any]]:
    """AdamW groups: >=2-D weights decay; biases and norm scales/shifts (1-D) only if asked."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 or decay_norm_and_bias else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class GPTLitModule(L.LightningModule):
    def __init__(self, model: GPTModel, optim: Mapping[str, Any], budget: Budget) -> None:
        super().__init__()
        self.model = model
        self.optim = dict(optim)
        self.budget = budget
        self.stats = model_stats(model)
        self.first_train_loss: float | None = None
        self.last_train_loss: float | None = None
        self._step_started: float | None = None
        self._accum_loss = torch.zeros(())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits = self.model(x)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    # --- training ----------------------------------------------------------------------------
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._step_started is None:
            self._step_started = time.perf_counter()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        # Loss of the optimizer step = mean over its micro-batches (what the gradient sees).
        self._accum_loss = self._accum_loss.to(loss.device) + loss.detach() / self.budget.grad_accum
        return loss

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        # Called once per optimizer step after unscaling (AMP): measure the pre-clip norm and clip.
        clip = self.optim.get("grad_clip")
        max_norm = float(clip) if clip else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)
        self.log("train/grad_norm", grad_norm, on_step=True, on_epoch=False)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if (batch_idx + 1) % self.budget.grad_accum:
            return  # mid-accumulation: no optimizer step yet
        now = time.perf_counter()
        elapsed = now - (self._step_started or now)
        self._step_started = None
        loss = self.trainer.strategy.reduce(self._accum_loss, reduce_op="mean")
        self._accum_loss = torch.zeros((), device=loss.device)
        loss_value = float(loss)
        if self.first_train_loss is None:
            self.first_train_loss = loss_value
        self.last_train_loss = loss_value
        step = self.trainer.global_step  # already incremented: number of optimizer steps done
        self.log_dict(
            {
                "train/loss": loss,
                "train/lr": self.trainer.optimizers[0].param_groups[0]["lr"],
                "train/tokens_seen": float(step * self.budget.tokens_per_step),
                # Tokens of all devices over this step's wall-clock (the study counts global tokens).
                "perf/tokens_per_sec": self.budget.tokens_per_step / max(elapsed, 1e-9),
            },
            on_step=True,
            on_epoch=False,
        )
        # Short names for the progress bar only.
        self.log("loss", loss, prog_bar=True, logger=False, on_step=True, on_epoch=False)
        self.log("tok/s", self.budget.tokens_per_step / max(elapsed, 1e-9), prog_bar=True, logger=False)

    # --- evaluation --------------------------------------------------------------------------
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), batch_size=batch[0].shape[0], sync_dist=True, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("test/loss", self._loss(batch), batch_size=batch[0].shape[0], sync_dist=True)

    # --- optimizer ---------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        o = self.optim
        optimizer = torch.optim.AdamW(
            param_groups(self.model, float(o["weight_decay"]), bool(o["decay_norm_and_bias"])),
            lr=float(o["lr"]),
            betas=tuple(o["betas"]),
            eps=float(o["eps"]),
            # The fused AdamW kernel is the fast path on CUDA; foreach (the default) elsewhere.
            fused=self.device.type == "cuda",
        )
        max_steps = self.budget.max_steps
        warmup = warmup_steps_for(max_steps, float(o["warmup_fraction"]))
        lr, min_lr = float(o["lr"]), float(o["min_lr"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, max_steps, warmup, lr, min_lr) / lr
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
