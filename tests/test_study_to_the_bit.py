"""The study's training, to the bit: `model.attention=explicit` with `model.op_order=study`, trained by
normsweep's own module and Trainer, against the study's operation sequence written out below.

The copy is written here from the order the study's published code (gpjt/ddp-base-model-from-scratch,
gpt.py and ddp_train.py's `train`) runs its operations in, not imported: its modules registered attention,
MLP, then the norms; its attention projecting K, then Q, then V; its LayerNorm dividing before it scales;
its loop zeroing, computing the loss, dividing by the accumulation steps, clipping, skipping a step with a
non-finite gradient, stepping AdamW and then the SequentialLR schedule. fp32 on the CPU, 30 steps, with the
clip below the gradients' norms so that clipping (which sums the parameters' norms in their order) acts.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from src.core.budget import Budget
from src.core.paths import compose
from src.model.gpt import GPTModel
from src.training.lit_module import GPTLitModule
from src.training.run_spec import model_config
from src.training.schedule import WARMUP_START_FACTOR, warmup_steps_for

VOCAB, T, D, HEADS, LAYERS, BATCH, STEPS = 97, 16, 32, 4, 2, 4, 30
LR, CLIP, WARMUP_FRACTION = 3e-2, 0.5, 0.1  # the gradients' norms here are 0.45-0.85: the clip acts on most steps


class StudyAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.W_query = nn.Linear(D, D, bias=False)
        self.W_key = nn.Linear(D, D, bias=False)
        self.W_value = nn.Linear(D, D, bias=False)
        self.out_proj = nn.Linear(D, D)
        self.dropout = nn.Dropout(0.0)
        self.register_buffer("mask", torch.triu(torch.ones(T, T), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)  # K first, then Q, then V
        keys, queries, values = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (keys, queries, values))
        scores = queries @ keys.transpose(2, 3)
        scores.masked_fill_(self.mask.bool()[:t, :t], -torch.inf)
        weights = self.dropout(torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1))
        return self.out_proj((weights @ values).transpose(1, 2).contiguous().view(b, t, D))


class StudyLayerNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(D))
        self.shift = nn.Parameter(torch.zeros(D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        normalized = (x - mean) / torch.sqrt(var + self.eps)  # divided first, then scaled
        return self.scale * normalized + self.shift


class StudyBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.att = StudyAttention()  # registered attention, MLP, then the norms
        self.ff = nn.Module()
        self.ff.layers = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))
        self.norm1 = StudyLayerNorm()
        self.norm2 = StudyLayerNorm()
        self.drop_shortcut = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop_shortcut(self.att(self.norm1(x))) + x
        return self.drop_shortcut(self.ff.layers(self.norm2(x))) + x


class StudyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, D)
        self.pos_emb = nn.Embedding(T, D)
        self.drop_emb = nn.Dropout(0.0)
        self.trf_blocks = nn.Sequential(*[StudyBlock() for _ in range(LAYERS)])
        self.final_norm = StudyLayerNorm()
        self.out_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.drop_emb(self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1])))
        return self.out_head(self.final_norm(self.trf_blocks(x)))


def study_training(model: StudyGPT, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    """ddp_train.py's loop on one process, fp32 (no scaler), one micro-batch per step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    warmup = warmup_steps_for(STEPS, WARMUP_FRACTION)
    scheduler = torch.optim.lr_scheduler.SequentialLR(
        optimizer,
        [torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=WARMUP_START_FACTOR, total_iters=warmup),
         torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS - warmup, eta_min=LR / 10)],
        milestones=[warmup],
    )  # fmt: skip
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        (loss / 1).backward()
        losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        if all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
            optimizer.step()
        scheduler.step()
    return losses


class _Losses(L.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object) -> None:
        self.losses.append(float(pl_module.last_train_loss))  # type: ignore[arg-type]


def normsweep_training(op_order: str, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[GPTModel, list[float]]:
    """The model a run builds from its config (a vocabulary below the tokenizer's, so not `validate`d), trained by
    normsweep's module and Trainer."""
    cfg = compose([
        "norm=hand_layernorm", "optim=adamw_study", "model.attention=explicit", f"model.op_order={op_order}",
        f"model.vocab_size={VOCAB}", f"model.context_length={T}", f"model.emb_dim={D}", f"model.n_heads={HEADS}",
        f"model.n_layers={LAYERS}", "model.drop_rate=0.0", "model.init=study",
    ])  # fmt: skip
    torch.manual_seed(42)  # the study's seed: its constructors draw in the same order
    model = GPTModel(model_config(cfg))
    optim = {**dict(cfg.optim), "lr": LR, "grad_clip": CLIP, "warmup_fraction": WARMUP_FRACTION, "min_lr_ratio": 0.1}
    module = GPTLitModule(model, optim, Budget(STEPS, 1, BATCH, BATCH * T, BATCH * T * STEPS))
    record = _Losses()
    trainer = L.Trainer(
        max_steps=STEPS, callbacks=[record], logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", devices=1,
    )  # fmt: skip
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    return model, record.losses


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return [(torch.randint(0, VOCAB, (BATCH, T), generator=g), torch.randint(0, VOCAB, (BATCH, T), generator=g)) for _ in range(STEPS)]


@pytest.mark.parametrize("op_order", ["study", "normsweep"])
def test_thirty_steps_are_the_studys_to_the_bit_in_its_order(op_order: str) -> None:
    batches = _batches()
    ours, our_losses = normsweep_training(op_order, batches)
    torch.manual_seed(42)
    study = StudyGPT()
    torch.manual_seed(42)
    start = GPTModel(ours.cfg).state_dict()
    # The same names, and the same seed drew the same weights: the constructors run in the study's order.
    assert all(torch.equal(p, start[n]) for n, p in study.named_parameters())
    study_losses = study_training(study, batches)
    trained = dict(study.named_parameters())
    loss_gap = max(abs(a - b) for a, b in zip(our_losses, study_losses, strict=True))
    weight_gap = max((p - trained[n]).abs().max().item() for n, p in ours.named_parameters())
    if op_order == "study":
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in study.named_parameters()]
        assert loss_gap == 0.0 and weight_gap == 0.0
    else:  # the same function in another order: rounding apart, and the comparison sees it
        assert 0.0 < loss_gap < 1e-5 and 0.0 < weight_gap < 1e-5
