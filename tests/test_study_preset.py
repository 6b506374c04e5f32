"""`experiment=gpt2_small_study` resolves to exactly the study's numbers (no GPU, no data needed)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import DictConfig

from src.core.budget import resolve_budget
from src.core.paths import compose, preset_norms
from src.model.gpt import GPTModel, count_params
from src.training.run_spec import validate
from src.training.schedule import warmup_cosine, warmup_steps_for

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


def test_learning_rate_schedule_end_points() -> None:
    o = _compose().optim
    assert (o.lr, o.min_lr, o.weight_decay, o.grad_clip, o.warmup_fraction) == (
        1.4e-3,
        1.4e-4,
        0.1,
        3.5,
        0.05,
    )
    warmup = warmup_steps_for(STEPS, o.warmup_fraction)
    assert warmup == 1_658
    assert warmup_cosine(0, STEPS, warmup, o.lr, o.min_lr) == pytest.approx(1.4e-3 / 1_658)
    assert warmup_cosine(warmup - 1, STEPS, warmup, o.lr, o.min_lr) == pytest.approx(1.4e-3)
    assert warmup_cosine(STEPS - 1, STEPS, warmup, o.lr, o.min_lr) == pytest.approx(1.4e-4)


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
