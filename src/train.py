"""Train one GPT-2 with one normalization variant: `python -m src.train norm=hand_rmsnorm`.

Flow: config -> validation -> data (token cache) -> LightningModule -> Trainer.fit -> test -> MLflow.
A sweep is a Hydra multirun: `python -m src.train -m norm='glob(*)'` or `-m experiment=norm_sweep`.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import asdict
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from src.config import validate
from src.data import build_datamodule
from src.data.datamodule import TokenDataModule
from src.devices import check_device, configure_matmul_precision
from src.model.gpt import GPTModel, count_params
from src.paths import ConfigError, register_resolvers
from src.tracking.identity import fingerprint, identity_config
from src.tracking.store import check_store
from src.tracking.sweep import PARENT_ENV, supersede
from src.tracking.tracker import TokenCacheRef, Tracker
from src.training.budget import Budget, resolve_budget
from src.training.callbacks import RunTracking
from src.training.checkpointing import LAST, SaveOnSigterm, checkpoint_dir, periodic_checkpoint
from src.training.divergence import DivergenceMonitor
from src.training.lit_module import GPTLitModule
from src.training.resume import RunPlan, RunResult, plan_run
from src.training.trainer import ProgressBar, build_trainer, compile_blocks, quiet_lightning

log = logging.getLogger(__name__)


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


def check_not_relaunching_sweep(world_size: int) -> None:
    """Refuse multi-process jobs inside a multirun unless SLURM or torchrun made the processes.

    Lightning's DDP launcher starts the other ranks by re-running sys.argv, which inside a Hydra
    multirun holds `-m` and the sweep lists: every rank would start the whole sweep again.
    """
    if world_size == 1 or not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    if SLURMEnvironment.detect() or TorchElasticEnvironment.detect():
        return
    raise ConfigError(
        f"cluster: {world_size} processes inside a multirun (-m): Lightning would re-run the command line "
        "and every process would restart the sweep; use cluster=slurm, wrap the sweep in torchrun, "
        "or run one job per command (docs/scaling.md)"
    )


def is_local_rank_zero() -> bool:
    # LOCAL_RANK: Lightning's launcher and torchrun; SLURM_LOCALID: tasks that SLURM started.
    return int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))) == 0


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def train(cfg: DictConfig) -> RunResult:
    """Validate, build, fit, test and close one run. Raises ConfigError before anything is recorded."""
    quiet_lightning()
    model_cfg = validate(cfg)
    if cfg.logger.enabled:
        check_store(cfg.logger.tracking_uri)  # seconds, not minutes, and before any data is prepared
    check_device(cfg)
    world_size = cfg.cluster.devices * cfg.cluster.num_nodes
    check_not_relaunching_sweep(world_size)
    fp, identity = fingerprint(cfg), identity_config(cfg)
    plan = plan_run(cfg, fp, in_multirun())
    if plan.message:
        print(f"[normsweep] {plan.message}", flush=True)
    if plan.done is not None:
        return plan.done

    configure_matmul_precision(cfg.precision.matmul_precision)
    # Same seed -> same initial weights and data order for every norm variant.
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()  # sequential multirun jobs share the process
    model = GPTModel(model_cfg)
    budget = resolve_budget(cfg.optim, cfg.seq_len, world_size, count_params(model))
    module = GPTLitModule(model, cfg.optim, budget, log_every_n_steps=cfg.log_every_n_steps)
    if cfg.compile:
        compile_blocks(model)
    datamodule = prepare_datamodule(cfg, budget)

    tracker = open_tracker(cfg, fp, plan) if cfg.logger.enabled else None
    callbacks = RunCallbacks(cfg, tracker, fp, identity)
    try:
        if tracker:
            stats = {"n_params": module.stats.n_params, "flops_per_token": module.stats.flops_per_token}
            tracker.log_inputs(
                {**stats, **{f"budget.{k}": v for k, v in asdict(budget).items()}},
                TokenCacheRef(datamodule.source.cache_key, datamodule.folder, datamodule.used_splits),
            )
        trainer = build_trainer(cfg, budget, tracker.logger if tracker else False, callbacks.all())
        trainer.fit(module, datamodule=datamodule, ckpt_path=plan.ckpt_path, weights_only=True)
        result = fit_result(cfg, module, callbacks, trainer.global_step * budget.tokens_per_step)
        if cfg.checkpoint.enabled and not callbacks.divergence.diverged:
            trainer.save_checkpoint(checkpoint_dir(cfg) / LAST)  # the end state, for later evaluation
        if not callbacks.divergence.diverged:
            trainer.test(module, datamodule=datamodule, verbose=False)
            result.test_loss = module.test_loss
        if tracker:
            tracker.log_final(final_metrics(result, module, trainer.global_step, budget))
            tracker.close(result.outcome, note=describe(result))
    except SIGTERMException:
        saved = callbacks.sigterm.saved
        if tracker:
            tracker.close("preempted")
        where = f"checkpoint saved at {saved}; re-run the command (or ckpt_path=last) to resume" if saved else (
            "no checkpoint (checkpoint.enabled=false)")
        print(f"[normsweep] {cfg.run_name} stopped by SIGTERM: {where}", flush=True)
        raise SystemExit(0) from None
    except BaseException as err:
        if tracker:
            tracker.close("killed" if isinstance(err, (KeyboardInterrupt, SystemExit)) else "failed")
        raise
    print(result.summary(), flush=True)
    return result


def prepare_datamodule(cfg: DictConfig, budget: Budget) -> TokenDataModule:
    try:
        datamodule = build_datamodule(
            cfg.data,
            context_length=cfg.seq_len,
            micro_batch_size=cfg.optim.micro_batch_size,
            global_batch_size=budget.global_batch_size,
            max_steps=budget.max_steps,
            seed=cfg.seed,
        )
    except (ValueError, FileNotFoundError) as err:  # an unknown source, a glob matching nothing, ...
        raise ConfigError(str(err)) from err
    if is_local_rank_zero():
        datamodule.prepare_data()  # tokenize/cache outside the timed fit
    return datamodule


def open_tracker(cfg: DictConfig, fp: str, plan: RunPlan) -> Tracker:
    overrides, job_num = hydra_context()
    parent = os.environ.get(PARENT_ENV) if in_multirun() else None
    tracker = Tracker(cfg, overrides, job_num, fp, run_id=plan.run_id, parent_run_id=parent)
    if plan.supersede and tracker.run_id:
        supersede(tracker.logger.experiment, plan.supersede, tracker.run_id)
    return tracker


class RunCallbacks:
    """The run's callbacks, held by name (Lightning reorders and extends the list it is given)."""

    def __init__(self, cfg: DictConfig, tracker: Tracker | None, fp: str, identity: dict[str, Any]) -> None:
        self.divergence = DivergenceMonitor()
        self.tracking = RunTracking(tracker, fp, identity, heartbeat_s=float(cfg.sweep.heartbeat_s))
        self.periodic = periodic_checkpoint(cfg)
        self.sigterm = SaveOnSigterm(checkpoint_dir(cfg) if cfg.checkpoint.enabled else None)
        self.progress = ProgressBar() if cfg.progress_bar else None
        self.extra: list[L.Callback] = []  # e.g. fault injection in the tests

    def all(self) -> list[L.Callback]:
        found = [*self.extra, self.divergence, self.tracking, self.periodic, self.sigterm, self.progress]
        return [c for c in found if c is not None]


def fit_result(cfg: DictConfig, module: GPTLitModule, callbacks: RunCallbacks, tokens_trained: int) -> RunResult:
    monitor = callbacks.divergence
    train_time_s = callbacks.tracking.train_time_s()
    return RunResult(
        norm=cfg.norm.norm_type,
        outcome="diverged" if monitor.diverged else "finished",
        train_time_s=train_time_s,
        tokens_per_sec=tokens_trained / train_time_s,
        first_train_loss=module.first_train_loss,
        final_train_loss=monitor.last_finite_loss if monitor.diverged else module.last_train_loss,
        test_loss=None,
        run_id=callbacks.tracking.tracker.run_id if callbacks.tracking.tracker else None,
        diverged_at_step=monitor.diverged_at_step,
    )


def describe(result: RunResult) -> str:
    """The run's one-paragraph description (its note in the MLflow UI)."""
    test = f"test loss {result.test_loss:.4f}" if result.test_loss is not None else "no test loss"
    outcome = f"diverged at step {result.diverged_at_step}" if result.outcome == "diverged" else result.outcome
    return (
        f"**{result.norm}**: {outcome}; {test}; trained {result.train_time_s:,.1f} s at "
        f"{result.tokens_per_sec:,.0f} tokens/s (run average)."
    )


def final_metrics(result: RunResult, module: GPTLitModule, steps_done: int, budget: Budget) -> dict[str, float]:
    """The run's headline numbers, logged once (at the tracker's summary step)."""
    final = {
        "train_time_s": result.train_time_s,
        "avg_tokens_per_sec": result.tokens_per_sec,  # the study's definition: tokens / training time
        "peak_memory_mb": peak_memory_mb(module.device),
        "n_params": float(module.stats.n_params),
        "steps_done": float(steps_done),
    }
    if module.first_step_s is not None and steps_done > 1:
        # The first step carries compilation and warm-up; the steady rate leaves it out.
        steady_time = result.train_time_s - module.first_step_s
        final["first_step_s"] = module.first_step_s
        final["avg_tokens_per_sec_after_first_step"] = (steps_done - 1) * budget.tokens_per_step / max(steady_time, 1e-9)
    if result.test_loss is not None:
        final["test_loss"] = result.test_loss
    if result.final_train_loss is not None:
        final["final_train_loss"] = result.final_train_loss
    if result.diverged_at_step is not None:
        final["diverged_at_step"] = float(result.diverged_at_step)
    return final


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
