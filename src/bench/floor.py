"""The floor a sweep's own cost is measured against: a bare Hydra multirun whose task composes
nothing more and runs one bare Lightning fit of the same GPT-2, with Lightning's MLFlowLogger.

    python -m src.bench.floor -m seed=0,1,2 tracking_uri=sqlite:////tmp/floor/mlflow.db

What any job of a Hydra + Lightning + MLflow sweep pays: importing them, Hydra's composition, the
model built, a fit of `steps` steps (validating every `val_every` steps) and a test pass on random
tokens, logged to MLflow. What normsweep adds above it (its checks, the store's bookkeeping, the
token cache, the run's record, checkpoints, the report) is the difference `python -m src.bench
overhead` measures. The model is normsweep's own (src/model/gpt.py), built from the same sizes.
Lightning loads as it ships, torchmetrics' optional imports with it, as in any such sweep
(normsweep's processes defer them: src/core/lean_lightning.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from src.core import lean_lightning

lean_lightning.uninstall()  # before Lightning is imported below

import hydra  # noqa: E402
import lightning as L  # noqa: E402
import torch  # noqa: E402
from hydra.core.config_store import ConfigStore  # noqa: E402
from lightning.pytorch.loggers import MLFlowLogger  # noqa: E402

from src.model.gpt import GPTConfig, GPTModel  # noqa: E402


@dataclass
class FloorConfig:
    seed: int = 0
    steps: int = 1
    val_every: int = 1
    batch: int = 4
    windows: int = 2  # validation and test batches
    n_layers: int = 1
    emb_dim: int = 32
    n_heads: int = 2
    context_length: int = 32
    norm: str = "torch_layernorm"
    lr: float = 3e-4
    tracking_uri: str = "sqlite:///floor-mlflow.db"
    experiment: str = "floor"


ConfigStore.instance().store(name="floor", node=FloorConfig)


@hydra.main(version_base="1.3", config_path=None, config_name="floor")
def main(cfg: Any) -> float:
    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = GPTModel(GPTConfig(
                vocab_size=50257, context_length=cfg.context_length, emb_dim=cfg.emb_dim, n_heads=cfg.n_heads,
                n_layers=cfg.n_layers, norm_type=cfg.norm,
            ))  # fmt: skip

        def _loss(self, batch: torch.Tensor) -> torch.Tensor:
            logits = self.model(batch[:, :-1])
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())

        def training_step(self, batch: torch.Tensor, i: int) -> torch.Tensor:
            loss = self._loss(batch)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: torch.Tensor, i: int) -> None:
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch: torch.Tensor, i: int) -> None:
            self.log("test_loss", self._loss(batch))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=cfg.lr)

    class TrainTime(L.Callback):  # as normsweep times training: the fit's start to its end
        def on_train_start(self, *args: Any) -> None:
            self.start = time.perf_counter()

        def on_train_end(self, *args: Any) -> None:
            self.seconds = time.perf_counter() - self.start

    L.seed_everything(cfg.seed, verbose=False)
    tokens = torch.randint(0, 50257, (cfg.batch * (cfg.steps + 2 * cfg.windows), cfg.context_length + 1))
    train, held = tokens[: cfg.batch * cfg.steps], tokens[cfg.batch * cfg.steps :]
    loader = lambda t: torch.utils.data.DataLoader(t, batch_size=cfg.batch)  # noqa: E731
    logger = MLFlowLogger(experiment_name=cfg.experiment, tracking_uri=cfg.tracking_uri, run_name=f"floor-s{cfg.seed}")
    # Its run opened now, before the fit, as normsweep opens its own (MLFlowLogger would open it at the
    # first logged loss, inside the fit: its bookkeeping timed as training, ~0.05 s a job here).
    logger.run_id  # noqa: B018
    timer = TrainTime()
    trainer = L.Trainer(
        max_steps=cfg.steps, val_check_interval=cfg.val_every, logger=logger, callbacks=[timer], accelerator="cpu",
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=cfg.windows, limit_test_batches=cfg.windows,
    )  # fmt: skip
    module = Module()
    trainer.fit(module, loader(train), loader(held[: cfg.batch * cfg.windows]))
    trainer.test(module, loader(held[cfg.batch * cfg.windows :]), verbose=False)
    logger.log_metrics({"train_time_s": timer.seconds})
    return float(trainer.callback_metrics["test_loss"])


if __name__ == "__main__":
    main()
