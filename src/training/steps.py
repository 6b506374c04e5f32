"""The training path, as the benchmarks use it: a composed config, the project's module, one step.

Benchmarks build what training builds — the config through `src.core.paths.compose`, the model config
through `src.training.run_spec.validate`, the budget through `src.core.budget.resolve_budget`, `GPTLitModule` with
its AdamW and schedule — and only replace the data with random tokens (data loading stays out of
the measurement) and Lightning's loop with `TrainStep` where a single step must be timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch.utils.data import DataLoader, TensorDataset

from src.core.budget import resolve_budget
from src.core.devices import DeviceSpec, check_device, configure_matmul_precision, uses_cuda
from src.core.paths import CONF_DIR, ConfigError, compose
from src.model.gpt import GPTConfig, GPTModel, count_params
from src.training.lit_module import GPTLitModule
from src.training.run_spec import validate

# Precision names of `conf/precision/*.yaml` (Lightning's) -> how a hand-written step runs them.
AUTOCAST = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "bf16-true": None}


def bench_config(overrides: Sequence[str], batch: int | None, steps: int) -> DictConfig:
    """The training config for `overrides`, set to train `steps` optimizer steps of `batch` sequences
    on one device with no accumulation, no checkpoints and no progress bar."""
    fixed = [
        "optim.grad_accum=1",
        "optim.global_batch_size=null",
        "optim.token_budget=null",
        "optim.tokens_per_param=null",
        f"optim.max_steps={steps}",
        f"val_every_n_steps={steps}",
        "checkpoint.enabled=false",
        "progress_bar=false",
    ]
    if batch is not None:
        fixed.append(f"optim.micro_batch_size={batch}")
    try:
        cfg = compose([*overrides, *fixed])
    except Exception as err:  # Hydra's message names the group or key and lists what exists
        presets = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
        raise ConfigError(f"{err} (model presets: {', '.join(presets)})") from err
    if cfg.cluster.devices * cfg.cluster.num_nodes != 1:
        raise ConfigError("cluster: benchmarks run on one device (cluster.devices=1, cluster.num_nodes=1)")
    return cfg


def device_of(cfg: DictConfig) -> torch.device:
    return torch.device("cuda" if uses_cuda(cfg) else "cpu")


def build_module(cfg: DictConfig, seed: int) -> tuple[GPTLitModule, GPTConfig]:
    """The model of `cfg` with the initial weights of `seed`, in the project's LightningModule."""
    model_cfg = validate(cfg)
    check_device(DeviceSpec.of(cfg))
    configure_matmul_precision(cfg.precision.matmul_precision)
    torch.manual_seed(seed)
    model = GPTModel(model_cfg)
    budget = resolve_budget(cfg.optim, cfg.seq_len, 1, count_params(model))
    module = GPTLitModule(model, cfg.optim, budget)
    return module, model_cfg


def random_batches(cfg: GPTConfig, seq_len: int, batch: int, n_batches: int, seed: int) -> DataLoader:
    """`n_batches` batches of uniformly random tokens, inputs and next-token targets."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (n_batches * batch, seq_len + 1), generator=gen)
    return DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=batch, shuffle=False)


class TrainStep:
    """One full optimizer step of a module as training runs it, without Lightning's loop.

    Forward and loss under the run's autocast, backward (with loss scaling for fp16), the module's
    gradient clipping, AdamW and the warmup-cosine schedule; `cfg.compile` compiles the blocks.
    """

    def __init__(self, module: GPTLitModule, cfg: DictConfig, device: torch.device) -> None:
        precision = str(cfg.precision.lightning)
        if precision not in AUTOCAST:
            raise ConfigError(f"precision.lightning: {precision!r}; valid choices: {', '.join(AUTOCAST)}")
        self.device = device
        self.autocast = AUTOCAST[precision]
        self.model = module.model.to(device)
        if precision == "bf16-true":
            self.model.to(torch.bfloat16)
        if cfg.compile:
            self.model.compile_blocks()
        module.to(device)
        optimizers: dict[str, Any] = module.configure_optimizers()
        self.optimizer = optimizers["optimizer"]
        self.scheduler = optimizers["lr_scheduler"]["scheduler"]
        self.clip = module.optim.get("grad_clip")
        self.scaler = torch.amp.GradScaler(device.type) if self.autocast == torch.float16 else None
        self.model.train()

    def autocast_context(self) -> torch.autocast:
        """The run's autocast (disabled for true fp32 and bf16-true)."""
        return torch.autocast(self.device.type, dtype=self.autocast or torch.float32, enabled=self.autocast is not None)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float:
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with self.autocast_context():
            # As in GPTLitModule.training_step, the loss is computed inside autocast.
            loss = F.cross_entropy(self.model(x).flatten(0, 1), y.flatten())
        if self.scaler:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.clip))
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())
