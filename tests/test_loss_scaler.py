"""Under a loss scaler (fp16) an overflowing step is skipped, as in the study's script, not taken
for a divergence; and the gradients that clipping sees are unscaled. A real Lightning fit, on the
CPU with a GradScaler: the same plugin code path as CUDA's `16-mixed`."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from src.core.budget import resolve_budget
from src.model.gpt import GPTConfig
from src.training.divergence import DivergenceMonitor
from src.training.lit_module import GPTLitModule, fused_adamw

OPTIM = {"lr": 1e-3, "min_lr_ratio": 0.1, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "decay_norm_and_bias": False,
         "warmup_fraction": 0.0, "grad_clip": 1.0, "micro_batch_size": 4, "grad_accum": 1, "global_batch_size": None,
         "max_steps": 3, "token_budget": None, "tokens_per_param": None}  # fmt: skip


def test_an_overflow_under_the_scaler_is_a_skipped_step_not_a_divergence() -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=97, context_length=8, emb_dim=16, n_heads=2, n_layers=1)
    module = GPTLitModule(cfg, OPTIM, resolve_budget(OPTIM, 8, 1, 1))
    tokens = torch.randint(0, 97, (12, 9))
    data = torch.utils.data.DataLoader(list(zip(tokens[:, :-1], tokens[:, 1:], strict=True)), batch_size=4)
    monitor = DivergenceMonitor()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**60)  # the first steps' scaled gradients overflow
    trainer = L.Trainer(accelerator="cpu", plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)], max_steps=3,
                        callbacks=[monitor], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)  # fmt: skip
    trainer.fit(module, data)
    assert scaler.get_scale() < 2.0**60  # it overflowed, and the scaler skipped and lowered its scale
    assert not monitor.diverged and trainer.global_step == 3


def test_no_fused_adamw_under_a_loss_scaler() -> None:
    assert fused_adamw("cuda", loss_scaled=False) and not fused_adamw("cuda", loss_scaled=True)
    assert not fused_adamw("cpu", loss_scaled=False)
