"""The study's own ways as choices: its explicit attention (`model.attention`), the weights its test
scores (`test_weights`) and its consecutive training windows (`data.order`): each the study's
computation, refused early when misspelt, and fingerprinted so that runs recorded before the keys
keep their identity."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader

from src.bench import variants as variant_bench
from src.core.budget import Budget
from src.core.paths import ConfigError, compose
from src.data.windows import OrderedWindows
from src.model.dispatch import record_dispatch
from src.model.gpt import GPTConfig, GPTModel
from src.tracking.identity import ADDED_LATER, Identity
from src.train import train
from src.training.best_weights import (
    STUDY_INTERVAL,
    STUDY_STEPS,
    BestTrainLoss,
    closes_interval,
    interval_steps,
)
from src.training.lit_module import GPTLitModule
from src.training.run_spec import validate

SMALL = {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 97}

# --- model.attention --------------------------------------------------------------------------


def _pair(**options: object) -> tuple[GPTModel, GPTModel]:
    torch.manual_seed(0)
    sdpa = GPTModel(GPTConfig(**SMALL, **options, attention="sdpa"))  # type: ignore[arg-type]
    torch.manual_seed(0)
    explicit = GPTModel(GPTConfig(**SMALL, **options, attention="explicit"))  # type: ignore[arg-type]
    return sdpa, explicit


@pytest.mark.parametrize("options", [{}, {"qk_norm": True, "norm_type": "hand_rmsnorm"}, {"init": "gpt2"}])
def test_explicit_attention_gives_the_fused_kernels_logits(options: dict[str, object]) -> None:
    sdpa, explicit = _pair(**options)
    # The same seed builds the same weights (the mask draws no random number) and the same state.
    assert sdpa.state_dict().keys() == explicit.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(sdpa.state_dict().values(), explicit.state_dict().values(), strict=True))
    idx = torch.randint(0, SMALL["vocab_size"], (3, SMALL["context_length"]), generator=torch.Generator().manual_seed(1))
    want, got = sdpa(idx), explicit(idx)
    # fp32: two orders of the same sums; the logits agree to a few float32 ulps of their size.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Causal: a later token never reaches an earlier position's logits.
    cut = explicit(idx[:, :8])
    torch.testing.assert_close(cut, got[:, :8], rtol=1e-5, atol=1e-5)


def test_explicit_attention_is_the_studys_op_order() -> None:
    _, explicit = _pair()
    att = explicit.trf_blocks[0].att
    q, k, v = (torch.randn(2, 4, 16, 8, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    # The study's MultiHeadAttention.forward: mask the raw scores, then scale inside the softmax.
    scores = q @ k.transpose(2, 3)
    scores.masked_fill_(torch.triu(torch.ones(16, 16), diagonal=1).bool(), -torch.inf)
    want = torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1) @ v
    assert torch.equal(att._explicit(q, k, v), want)  # bit for bit, not within a tolerance


def test_the_speed_check_runs_each_attentions_own_kernels() -> None:
    tiny = ["model.n_layers=1", "model.emb_dim=32", "model.n_heads=2", "model.context_length=16", "optim.micro_batch_size=2"]
    chosen = {"sdpa": ["model.attention=sdpa"], "explicit": ["model.attention=explicit"]}
    steps, models, _ = variant_bench.build_variants(tiny, chosen, None, steps=2, seed=3)
    x = torch.randn(2, 16, 32)
    ops = {name: record_dispatch(model.trf_blocks[0].att, x) for name, model in models.items()}
    assert any("scaled_dot_product" in op for op in ops["sdpa"].forward)
    assert not any("softmax" in op for op in ops["sdpa"].forward)
    assert any("softmax" in op for op in ops["explicit"].forward)
    assert any("masked_fill" in op for op in ops["explicit"].forward)
    assert not any("scaled_dot_product" in op for op in ops["explicit"].forward)
    batch = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))
    losses = {name: step(*batch) for name, step in steps.items()}  # both train, from the same weights
    assert losses["sdpa"] == pytest.approx(losses["explicit"], rel=1e-5)


# --- refused early, naming the field and its choices ---------------------------------------------


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("model.attention=flash", r"^model\.attention: 'flash' is not one of sdpa, explicit$"),
        ("test_weights=best", r"^test_weights: 'best' is not one of the valid choices: final, best_train_loss$"),
        ("data.order=shuffled", r"^data\.order: 'shuffled' is not one of the valid choices: drawn, in_order$"),
        ("model.op_order=theirs", r"^model\.op_order: 'theirs' is not one of normsweep, study$"),
    ],
)
def test_a_misspelt_choice_is_refused_before_anything_runs(override: str, line: str) -> None:
    with pytest.raises(ConfigError, match=line):
        validate(compose([override]))


def test_in_order_windows_past_the_split_are_refused() -> None:
    with pytest.raises(ValueError, match="5 consecutive windows of 4 need 21 tokens, the split has 20"):
        OrderedWindows(np.arange(20), 4, 5)


def test_in_order_windows_are_the_studys_consecutive_ones() -> None:
    tokens = np.arange(41)
    windows = OrderedWindows(tokens, 4, 10)
    # The study's BigTrainDataset: tokens[:-1] and tokens[1:] cut into context-length rows, in order.
    xs, ys = np.asarray(tokens[:-1]).reshape(-1, 4), np.asarray(tokens[1:]).reshape(-1, 4)
    for i in range(10):
        x, y = windows[i]
        assert x.tolist() == xs[i].tolist() and y.tolist() == ys[i].tolist()


# --- fingerprints: runs recorded before the keys keep theirs -----------------------------------


def test_the_default_values_leave_recorded_fingerprints_as_they_were() -> None:
    # The default config's fingerprint before these keys existed (commit ffd6b88), and the study preset's.
    assert Identity.of(compose([])).fingerprint == "5f7a44aa039049b9"
    assert ADDED_LATER["model.attention"] == "sdpa" and ADDED_LATER["data.order"] == "drawn"
    assert ADDED_LATER["test_weights"] == "final" and ADDED_LATER["model.op_order"] == "normsweep"
    base = Identity.of(compose([]))
    for override in ("model.attention=explicit", "data.order=in_order", "test_weights=best_train_loss", "model.op_order=study"):
        other = Identity.of(compose([override]))
        assert other.fingerprint != base.fingerprint, override  # each is its own config, swept like any key
        key, _, value = override.partition("=")
        assert other.params[key] == value and base.params[key] == ADDED_LATER[key]  # recorded as MLflow params


def test_the_study_preset_takes_the_studys_way_and_composes_with_the_choices() -> None:
    cfg = compose(["experiment=gpt2_small_study"])
    assert (cfg.model.attention, cfg.data.order, cfg.test_weights, cfg.model.op_order) == ("explicit", "in_order", "best_train_loss", "study")
    back = compose(["experiment=gpt2_small_study", "model.attention=sdpa", "data.order=drawn", "test_weights=final", "model.op_order=normsweep"])
    validate(back)
    assert (back.model.attention, back.data.order, back.test_weights, back.model.op_order) == ("sdpa", "drawn", "final", "normsweep")


# --- test_weights=best_train_loss: the study's rule ----------------------------------------------


def test_the_interval_is_the_studys_share_of_the_run() -> None:
    assert interval_steps(STUDY_STEPS) == STUDY_INTERVAL
    assert interval_steps(150) == 3 and interval_steps(10) == 1  # never 0
    # The study's loop: index 0 closes the first interval (one step), then every multiple, and the last.
    assert [s for s in range(10) if closes_interval(s, 3, 10)] == [0, 3, 6, 9]
    assert [s for s in range(8) if closes_interval(s, 3, 8)] == [0, 3, 6, 7]


EASY_STEPS, STEPS = 60, 120  # constant sequences, then random tokens: the loss is lowest at the switch


class _Recorder(L.Callback):
    """Each optimizer step's loss and weights, as the test's own record."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.weights: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object) -> None:
        self.losses.append(float(pl_module.last_train_loss))  # type: ignore[arg-type]
        self.weights.append({k: v.detach().clone() for k, v in pl_module.model.state_dict().items()})


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    easy = [(torch.full((2, 8), 5), torch.full((2, 8), 5)) for _ in range(EASY_STEPS)]
    hard = [(torch.randint(0, 97, (2, 8), generator=g), torch.randint(0, 97, (2, 8), generator=g)) for _ in range(STEPS - EASY_STEPS)]
    return easy + hard


def test_best_train_loss_scores_the_weights_of_the_lowest_interval() -> None:
    torch.manual_seed(0)
    model = GPTModel(GPTConfig(**{**SMALL, "context_length": 8}, init="gpt2"))
    optim = {**dict(compose([]).optim), "lr": 3e-3, "warmup_fraction": 0.0, "grad_clip": 1.0}
    module = GPTLitModule(model, optim, Budget(STEPS, 1, 2, 16, 16 * STEPS))
    best, record = BestTrainLoss(STEPS), _Recorder()
    trainer = L.Trainer(
        max_steps=STEPS, callbacks=[best, record], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
    )  # fmt: skip
    trainer.fit(module, train_dataloaders=DataLoader(_batches(), batch_size=None))
    interval = interval_steps(STEPS)
    assert interval == 2
    # The rule, computed here from the recorded losses: interval means, the strictly lowest first.
    means, open_, closed_at = [], [], []
    for step, loss in enumerate(record.losses):
        open_.append(loss)
        if step % interval == 0 or step == STEPS - 1:
            means.append(sum(open_) / len(open_))
            closed_at.append(step + 1)
            open_ = []
    want = closed_at[means.index(min(means))]
    assert best.best_step == want and best.best_loss == pytest.approx(min(means))
    # Known by construction: the minimum is on the constant sequences, before the random tokens.
    assert want <= EASY_STEPS and record.losses[-1] > 2 * min(means)
    assert all(torch.equal(best.best_weights[k], v) for k, v in record.weights[want - 1].items())  # type: ignore[index]
    # The test scores the kept weights, not the final ones.
    final = {k: v.clone() for k, v in module.model.state_dict().items()}
    easy = DataLoader(_batches()[:4], batch_size=None)
    trainer.test(module, dataloaders=easy, verbose=False)
    assert all(torch.equal(module.model.state_dict()[k], v) for k, v in record.weights[want - 1].items())
    assert not all(torch.equal(module.model.state_dict()[k], v) for k, v in final.items())
    assert module.test_loss is not None and math.isfinite(module.test_loss)
    # The rule's state travels in a checkpoint: a resumed run keeps the weights it had kept.
    again = BestTrainLoss(STEPS)
    again.load_state_dict(best.state_dict())
    assert again.best_step == want and again.best_weights is best.best_weights


def test_a_run_with_the_studys_three_ways_records_them_and_its_scored_step(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    ways = ["model.attention=explicit", "data.order=in_order", "test_weights=best_train_loss"]
    result = train(compose([*tiny_overrides, *ways, "checkpoint.enabled=true", f"checkpoint.dir={ckpt}"]))
    run = MlflowClient(store["uri"]).get_run(result.run_id)
    fineweb_only = ("data.split_by", "data.literal_eot")  # keys of that source alone: this run's corpus has neither
    assert not any(k in run.data.params for k in fineweb_only)
    recorded = {k: run.data.params[k] for k in ADDED_LATER if k not in ("model.init", *fineweb_only)}
    assert recorded == {**dict(w.split("=") for w in ways), "optim.name": "adamw", "model.op_order": "normsweep"}
    losses = [m.value for m in MlflowClient(store["uri"]).get_metric_history(result.run_id, "train/train_loss")]
    assert len(losses) == 4 and interval_steps(4) == 1  # every step closes an interval: the lowest step is scored
    assert run.data.metrics["test_weights_step"] == 1 + losses.index(min(losses))
    state = torch.load(ckpt / "last.ckpt", weights_only=True)["callbacks"]["BestTrainLoss"]
    assert state["best_step"] == run.data.metrics["test_weights_step"] and state["best_weights"]
