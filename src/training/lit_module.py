"""The LightningModule: GPT-2 (norms from the factory), AdamW, warmup-cosine, per-step metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from src.core.budget import Budget
from src.model.gpt import GPTConfig, GPTModel, model_stats
from src.training.schedule import lr_factor, warmup_steps_for

STATE_KEY = "normsweep"  # the module's entry in a checkpoint


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


def fused_adamw(device_type: str, loss_scaled: bool) -> bool:
    """The fused AdamW kernel is the fast path on CUDA (on the CPU torch's default is as fast here).
    Not under a loss scaler (fp16): the fused kernel unscales inside its step, so Lightning hands
    `configure_gradient_clipping` the scaled gradients and clipping would cut them by the scale
    (measured with a GradScaler on the CPU: a pre-clip norm of 43,136 for 1.316); the default
    AdamW is unscaled first, as in the study's script."""
    return device_type == "cuda" and not loss_scaled


class GPTLitModule(L.LightningModule):
    def __init__(
        self,
        model: GPTModel | GPTConfig,
        optim: Mapping[str, Any],
        budget: Budget,
        log_every_n_steps: int = 1,
        compile: bool = False,
    ) -> None:
        """`model`: built, or its config (built here, from the global seed); `compile`: regional
        compilation, each transformer block compiled once and reused by all of them."""
        super().__init__()
        self.log_every_n_steps = log_every_n_steps
        self.model = model if isinstance(model, GPTModel) else GPTModel(model)
        if compile:
            self.model.compile_blocks()
        self.optim = dict(optim)
        self.budget = budget
        self.stats = model_stats(self.model)
        self.first_train_loss: float | None = None
        self.last_train_loss: float | None = None
        self.last_grad_norm = torch.zeros(())
        self.test_loss: float | None = None
        self._step_started: float | None = None
        self._accum_loss = torch.zeros(())
        self._step_done: tuple[float, float] | None = None  # (loss, tokens/s) of the step just taken
        self._unlogged: dict[str, Any] | None = None  # a restored checkpoint's step metrics, maybe never logged
        self.first_step_s: float | None = None
        self._eval_sum = torch.zeros((), dtype=torch.float64)
        self._eval_count = 0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits = self.model(x)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    # --- training ----------------------------------------------------------------------------
    # Metrics go to the logger with step = optimizer steps done (1-based), the same axis for train,
    # val and the final metrics; self.log(..., logger=False) feeds only the progress bar.
    # Metric keys are unique in their last component, so MLflow's chart titles cannot collide.
    def _log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self.logger is not None:
            self.logger.log_metrics(metrics, step=self.trainer.global_step if step is None else step)

    # The run's first and last losses and first step time survive a resume: a run resumed from its
    # end-of-training checkpoint trains no step, yet still reports its final train loss.
    # A periodic checkpoint at step N is written by a callback, before this module logs step N's
    # metrics (on_train_batch_end): it carries them, and a run resumed from it logs them unless MLflow
    # already has that step (a store failure at that write would otherwise leave a gap in the curves).
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        step = self.trainer.global_step
        metrics = self._step_metrics(step)
        checkpoint[STATE_KEY] = {
            "first_train_loss": self.first_train_loss,
            "last_train_loss": self.last_train_loss,
            "first_step_s": self.first_step_s,
            "unlogged": {"step": step, "metrics": metrics} if metrics else None,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get(STATE_KEY, {})
        self.first_train_loss = state.get("first_train_loss")
        self.last_train_loss = state.get("last_train_loss")
        self.first_step_s = state.get("first_step_s")
        self._unlogged = state.get("unlogged")

    def on_train_start(self) -> None:
        if self._unlogged is not None:
            # The logger skips a step MLflow already has (Tracker: log_after_step).
            self._log_metrics(self._unlogged["metrics"], self._unlogged["step"])
        self._unlogged = None

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
        self.last_grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm).detach()

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        # The step's loss is booked here, not in on_train_batch_end: Lightning runs the callbacks'
        # on_train_batch_end (the periodic ModelCheckpoint among them) before the module's, so a
        # checkpoint written at step N carried step N-1's loss, and a run resumed from it reported
        # that as its final train loss.
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        now = time.perf_counter()
        elapsed = max(now - (self._step_started or now), 1e-9)
        self._step_started = None
        loss = float(self.trainer.strategy.reduce(self._accum_loss, reduce_op="mean"))
        self._accum_loss = torch.zeros((), device=self.device)
        if self.first_train_loss is None:
            self.first_train_loss = loss
        if self.first_step_s is None:
            self.first_step_s = elapsed  # includes compilation and allocator warm-up
        self.last_train_loss = loss
        # Tokens of all devices over this step's wall-clock (the study counts global tokens).
        self._step_done = (loss, self.budget.tokens_per_step / elapsed)

    def _step_metrics(self, step: int) -> dict[str, float] | None:
        """The logged metrics of optimizer step `step`, just taken; None mid-accumulation or between
        logged steps."""
        if self._step_done is None or not (step % self.log_every_n_steps == 0 or step == self.budget.max_steps):
            return None
        loss, tokens_per_sec = self._step_done
        return {
            "train/train_loss": loss,
            "train/lr": self.trainer.optimizers[0].param_groups[0]["lr"],
            "train/grad_norm": float(self.last_grad_norm),
            "train/tokens_seen": float(step * self.budget.tokens_per_step),
            "perf/step_tokens_per_sec": tokens_per_sec,  # this step only; the run's average is final
        }

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._step_done is None:
            return  # mid-accumulation: no optimizer step yet
        metrics = self._step_metrics(self.trainer.global_step)  # already incremented: optimizer steps done
        loss, tokens_per_sec = self._step_done
        self._step_done = None
        if metrics is not None:
            self._log_metrics(metrics)
        self.log_dict({"loss": loss, "tok/s": tokens_per_sec}, prog_bar=True, logger=False)

    # --- evaluation --------------------------------------------------------------------------
    # Exact mean over all windows (every window has seq_len tokens), summed across ranks.
    def _eval_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        n = batch[0].shape[0]
        self._eval_sum += self._loss(batch).detach().double() * n
        self._eval_count += n

    def _eval_start(self) -> None:
        self._eval_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self._eval_count = 0

    def _eval_end(self, key: str, to_logger: bool = True) -> float:
        total = self.trainer.strategy.reduce(self._eval_sum, reduce_op="sum")
        count = self.trainer.strategy.reduce(
            torch.tensor(self._eval_count, dtype=torch.float64, device=self.device), reduce_op="sum"
        )
        value = float(total / count)
        if to_logger:
            self._log_metrics({key: value})
        self.log(key, value, prog_bar=True, logger=False)
        return value

    def on_validation_epoch_start(self) -> None:
        self._eval_start()

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val/val_loss")

    def on_test_epoch_start(self) -> None:
        self._eval_start()

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        # Not logged here: the test loss is a final result, written once with the others (src/train.py).
        self.test_loss = self._eval_end("test_loss", to_logger=False)

    # --- optimizer ---------------------------------------------------------------------------
    def _loss_scaled(self) -> bool:
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached: the optimizer is built outside a fit (a test, a notebook)
            return False
        return getattr(trainer.precision_plugin, "scaler", None) is not None

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.optim
        optimizer = torch.optim.AdamW(
            param_groups(self.model, float(o["weight_decay"]), bool(o["decay_norm_and_bias"])),
            lr=float(o["lr"]),
            betas=tuple(o["betas"]),
            eps=float(o["eps"]),
            fused=fused_adamw(self.device.type, self._loss_scaled()),
        )
        max_steps = self.budget.max_steps
        warmup = warmup_steps_for(max_steps, float(o["warmup_fraction"]))
        floor = float(o["min_lr_ratio"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, max_steps, warmup, floor))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
