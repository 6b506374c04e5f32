"""Train one GPT-2 with one normalization variant: `python -m src.train norm=hand_rmsnorm`.

Flow: config -> validation -> data (token cache) -> LightningModule -> Trainer.fit -> test -> MLflow.
A sweep is a Hydra multirun: `python -m src.train -m norm='glob(*)'` or `-m experiment=norm_sweep`.
"""

from __future__ import annotations

import logging
import os
import resource
import time
import warnings
from dataclasses import dataclass

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from src.config import ConfigError, register_resolvers, resolve_budget, validate
from src.data import build_datamodule
from src.devices import check_device, configure_matmul_precision
from src.divergence import DivergenceMonitor
from src.lit_module import GPTLitModule
from src.model import GPTModel, count_params
from src.tracking import Tracker

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    norm: str
    outcome: str  # finished | diverged
    train_time_s: float
    tokens_per_sec: float
    first_train_loss: float | None
    final_train_loss: float | None
    test_loss: float | None
    run_id: str | None
    diverged_at_step: int | None = None

    def summary(self) -> str:
        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.4f}"

        status = f"DIVERGED at step {self.diverged_at_step}" if self.outcome == "diverged" else "ok"
        return (
            f"[normsweep] {self.norm} {status} | train {self.train_time_s:.1f} s | {self.tokens_per_sec:,.0f} tok/s"
            f" | train loss {fmt(self.first_train_loss)} -> {fmt(self.final_train_loss)}"
            f" | test loss {fmt(self.test_loss)} | mlflow run {self.run_id or '-'}"
        )


def quiet_lightning() -> None:
    # Noise only on the CPU defaults: one in-process loader is deliberate (memmapped windows are cheap).
    for pattern in (
        ".*does not have many workers.*",
        ".*The number of training batches.*",
        ".*GPU available but not used.*",
        ".*Checkpoint directory.*exists and is not empty.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # CPU: peak resident set size of the process (Linux reports KiB); process-wide, so in a
    # sequential multirun it is the peak so far, not only this job's.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def hydra_context() -> tuple[list[str], int | None]:
    """The command-line overrides and the multirun job number, when running under Hydra."""
    if not HydraConfig.initialized():
        return [], None
    hc = HydraConfig.get()
    return list(hc.overrides.task), OmegaConf.select(hc, "job.num", default=None)


def train(cfg: DictConfig) -> RunResult:
    """Validate, train, test and track one run. Raises ConfigError before anything is recorded."""
    quiet_lightning()
    model_cfg = validate(cfg)
    check_device(cfg)
    configure_matmul_precision(cfg.precision.matmul_precision)
    world_size = cfg.cluster.devices * cfg.cluster.num_nodes
    # Same seed -> same initial weights and data order for every norm variant.
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()  # sequential multirun jobs share the process

    model = GPTModel(model_cfg)
    budget = resolve_budget(cfg.optim, cfg.seq_len, world_size, count_params(model))
    module = GPTLitModule(model, cfg.optim, budget, log_every_n_steps=cfg.log_every_n_steps)
    datamodule = build_datamodule(
        cfg.data,
        context_length=cfg.seq_len,
        micro_batch_size=cfg.optim.micro_batch_size,
        train_samples=budget.max_steps * budget.global_batch_size,
        seed=cfg.seed,
    )
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        datamodule.prepare_data()  # tokenize/cache outside the timed fit

    overrides, job_num = hydra_context()
    tracker = Tracker(cfg, overrides, job_num) if cfg.logger.enabled else None
    try:
        if tracker:
            tracker.log_inputs(
                {
                    "n_params": module.stats.n_params,
                    "flops_per_token": module.stats.flops_per_token,
                    "budget.max_steps": budget.max_steps,
                    "budget.grad_accum": budget.grad_accum,
                    "budget.global_batch_size": budget.global_batch_size,
                    "budget.total_tokens": budget.total_tokens,
                }
            )
        monitor = DivergenceMonitor()
        trainer = L.Trainer(
            accelerator=cfg.cluster.accelerator,
            devices=cfg.cluster.devices,
            num_nodes=cfg.cluster.num_nodes,
            strategy=cfg.cluster.strategy,
            precision=cfg.precision.lightning,
            max_steps=budget.max_steps,
            max_epochs=-1,
            accumulate_grad_batches=budget.grad_accum,
            # Clipping happens in GPTLitModule.configure_gradient_clipping (it also logs the norm).
            val_check_interval=cfg.val_every_n_steps * budget.grad_accum,
            check_val_every_n_epoch=None,
            num_sanity_val_steps=0,
            logger=tracker.logger if tracker else False,
            callbacks=[monitor],
            enable_checkpointing=False,
            enable_progress_bar=cfg.progress_bar,
            enable_model_summary=False,
        )
        started = time.perf_counter()
        trainer.fit(module, datamodule=datamodule)
        train_time_s = time.perf_counter() - started
        steps_done = trainer.global_step
        tokens_trained = steps_done * budget.tokens_per_step
        result = RunResult(
            norm=cfg.norm.norm_type,
            outcome="diverged" if monitor.diverged else "finished",
            train_time_s=train_time_s,
            tokens_per_sec=tokens_trained / train_time_s,
            first_train_loss=module.first_train_loss,
            final_train_loss=monitor.last_finite_loss if monitor.diverged else module.last_train_loss,
            test_loss=None,
            run_id=tracker.run_id if tracker else None,
            diverged_at_step=monitor.diverged_at_step,
        )
        if not monitor.diverged:
            trainer.test(module, datamodule=datamodule, verbose=False)
            result.test_loss = module.test_loss
        if tracker:
            final = {
                "train_time_s": result.train_time_s,
                "tokens_per_sec": result.tokens_per_sec,
                "peak_memory_mb": peak_memory_mb(module.device),
                "n_params": float(module.stats.n_params),
                "steps_done": float(steps_done),
            }
            if result.final_train_loss is not None:
                final["final_train_loss"] = result.final_train_loss
            if monitor.diverged:
                final["diverged_at_step"] = float(monitor.diverged_at_step)
            tracker.log_final(final, step=steps_done)
            tracker.close(result.outcome)
    except BaseException:
        if tracker:
            tracker.close("failed")
        raise
    print(result.summary(), flush=True)
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        result = train(cfg)
    except ConfigError as err:
        # A clear one-line message; Hydra prints the traceback only with HYDRA_FULL_ERROR=1.
        raise SystemExit(f"config error: {err}") from None
    # Hydra sweepers that optimise read this return value.
    return result.test_loss


register_resolvers()  # before Hydra composes: paths use ${project_root:}

if __name__ == "__main__":
    main()
