"""`experiment=gpt2_small_study` resolves to exactly the study's numbers (no GPU, no data needed)."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from src.core.budget import resolve_budget
from src.core.paths import compose, preset_norms
from src.model.gpt import GPTModel, count_params
from src.training.lit_module import GPTLitModule
from src.training.run_spec import validate
from src.training.schedule import WARMUP_START_FACTOR, lr_factor, warmup_steps_for

NORMS = preset_norms("norm_sweep")  # the study's five, as conf/experiment/norm_sweep.yaml lists them
STEPS = 33_165
TOKENS = 3_260_252_160


def _compose(*overrides: str) -> DictConfig:
    return compose(["experiment=gpt2_small_study", *overrides], with_hydra=True)


def _n_params(cfg: DictConfig) -> int:
    with torch.device("meta"):  # shapes only: no memory, no initialization time
        return count_params(GPTModel(validate(cfg)))


def test_model_data_precision_and_sweep() -> None:
    cfg = _compose()
    assert cfg.experiment_name == "gpt2_small_study"
    m = cfg.model
    assert (m.n_layers, m.emb_dim, m.n_heads, m.context_length, m.vocab_size) == (12, 768, 12, 1024, 50257)
    assert m.drop_rate == 0.0 and not m.tie_weights and cfg.seq_len == 1024
    assert _n_params(cfg) == 163_009_536  # the default norm is torch_layernorm
    assert cfg.precision.lightning == "16-mixed" and cfg.precision.matmul_precision == "high"
    d = cfg.data
    assert (d.source, d.dataset, d.subset, d.val_fraction) == (
        "fineweb",
        "HuggingFaceFW/fineweb",
        "sample-10BT",
        0.01,
    )
    assert cfg.hydra.sweeper.params.norm.split(",") == NORMS


@pytest.mark.parametrize("norm", NORMS)
def test_every_norm_trains_the_same_33165_steps(norm: str) -> None:
    cfg = _compose(f"norm={norm}")
    budget = resolve_budget(cfg.optim, cfg.seq_len, world_size=8, n_params=_n_params(cfg))
    assert (budget.max_steps, budget.total_tokens) == (STEPS, TOKENS)
    assert (budget.global_batch_size, budget.grad_accum, budget.tokens_per_step) == (96, 1, 96 * 1024)


@pytest.mark.parametrize("gpus,accum", [(8, 1), (4, 2), (1, 8)])
def test_global_batch_is_fixed_whatever_the_gpu_count(gpus: int, accum: int) -> None:
    cfg = _compose()
    budget = resolve_budget(cfg.optim, cfg.seq_len, world_size=gpus, n_params=163_009_536)
    assert (budget.grad_accum, budget.global_batch_size, budget.max_steps) == (accum, 96, STEPS)
    assert cfg.optim.micro_batch_size * gpus * accum == 96


def test_learning_rate_schedule_is_the_studys() -> None:
    # The study's ddp_train.py: LinearLR(start_factor=1e-5) over the warmup, then
    # CosineAnnealingLR(T_max=steps - warmup, eta_min=lr / 10), chained by SequentialLR.
    o = _compose().optim
    assert (o.lr, o.min_lr_ratio, o.weight_decay, o.grad_clip, o.warmup_fraction) == (1.4e-3, 0.1, 0.1, 3.5, 0.05)
    warmup = warmup_steps_for(STEPS, o.warmup_fraction)
    assert warmup == 1_658 == STEPS * 5 // 100
    model = nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=o.lr)
    theirs = torch.optim.lr_scheduler.SequentialLR(
        opt,
        [torch.optim.lr_scheduler.LinearLR(opt, start_factor=WARMUP_START_FACTOR, total_iters=warmup),
         torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS - warmup, eta_min=o.lr / 10)],
        milestones=[warmup],
    )  # fmt: skip
    for step in range(STEPS):
        if step in (0, 1, warmup - 1, warmup, warmup + 1, STEPS // 2, STEPS - 1):
            assert o.lr * lr_factor(step, STEPS, warmup, o.min_lr_ratio) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-6), step
        opt.step()
        theirs.step()


def test_the_presets_model_starts_from_pytorchs_constructor_defaults() -> None:
    # Built as a run builds it (the preset's config -> GPTConfig -> GPTModel), at the study's size.
    cfg = _compose()
    torch.manual_seed(0)
    model = GPTModel(validate(cfg))
    assert model.cfg.init == "study"
    for emb in (model.tok_emb, model.pos_emb):  # nn.Embedding: N(0, 1), not GPT-2's N(0, 0.02)
        assert emb.weight.std().item() == pytest.approx(1.0, abs=0.01)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 12 * 6 + 1
    for linear in linears:  # Kaiming-uniform(a=sqrt(5)): weights and biases within 1/sqrt(fan_in), uniform
        bound = 1 / math.sqrt(linear.in_features)
        assert linear.weight.abs().max().item() <= bound
        assert linear.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.02)
        if linear.bias is not None:
            assert linear.bias.abs().max().item() <= bound and linear.bias.abs().max().item() > bound / 2


def test_the_presets_optimizer_decays_every_parameter_as_the_studys() -> None:
    # The study's AdamW(model.parameters(), weight_decay=0.1): norm scales and shifts and biases too.
    cfg = _compose("model.n_layers=2", "model.emb_dim=64", "model.n_heads=2")  # the preset's optimizer, a small model
    model = validate(cfg)
    budget = resolve_budget(cfg.optim, cfg.seq_len, world_size=8, n_params=1)
    optim = OmegaConf.to_container(cfg.optim, resolve=True)
    assert isinstance(optim, dict)
    module = GPTLitModule(model, optim, budget)
    optimizer = module.configure_optimizers()["optimizer"]
    decay_of = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
    named = dict(module.model.named_parameters())
    one_d = [n for n, p in named.items() if p.dim() == 1]
    assert any("norm" in n for n in one_d) and any(n.endswith("bias") for n in one_d)
    assert {n: decay_of[id(p)] for n, p in named.items()} == {n: 0.1 for n in named}
    assert optimizer.defaults["betas"] == (0.9, 0.999)  # the study's AdamW takes PyTorch's default betas


def test_test_window_is_fixed_inside_val_past_the_validation_windows() -> None:
    cfg = _compose()
    d = cfg.data
    assert (d.test_split, d.test_offset, d.test_max_windows) == ("val", 50_000_000, 19_200)
    assert d.test_max_windows * cfg.seq_len == 19_660_800 == 3_200 * 6 * 1024
    assert d.val_max_windows * cfg.seq_len + 1 <= d.test_offset  # no token is both validated and tested


def test_cluster_options_compose_with_the_preset() -> None:
    node = _compose("cluster=gpu_node")
    assert (node.cluster.devices, node.cluster.strategy, node.cluster.num_nodes) == (8, "ddp", 1)
    slurm = _compose("cluster=slurm", "cluster.num_nodes=4", "hydra.launcher.partition=gpu")
    launcher = slurm.hydra.launcher
    assert launcher._target_.endswith("SlurmSweepLauncher")  # submits only the jobs left (src/launch/slurm_launcher.py)
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (4, 8, 8)
    assert launcher.partition == "gpu" and launcher.timeout_min > 0
