"""The Lightning Trainer as every run and benchmark builds it, and the settings around it."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import TQDMProgressBar

from src.core.atomic_io import write_checkpoint
from src.core.budget import Budget
from src.core.devices import DeviceSpec, configure_matmul_precision
from src.core.paths import ConfigError
from src.data.datamodule import TokenDataModule, build_datamodule

if TYPE_CHECKING:
    from src.training.run_spec import TrainSpec


def quiet_lightning() -> None:
    # Noise only on the CPU defaults: one in-process loader is deliberate (memmapped windows are cheap).
    for pattern in (
        ".*does not have many workers.*",
        ".*The number of training batches.*",
        ".*GPU available but not used.*",
        ".*The `srun` command is available on your system but is not used.*",  # torchrun on a SLURM login node
        ".*Checkpoint directory.*exists and is not empty.*",
        # Our loader resumes through ResumableRankSampler, which Lightning's check cannot see.
        ".*your dataloader is not resumable.*",
        ".*isinstance\\(treespec, LeafSpec\\)` is deprecated.*",  # Lightning vs newer torch, harmless
    ):
        warnings.filterwarnings("ignore", message=pattern)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)


class ProgressBar(TQDMProgressBar):
    """Lightning's bar without `v_num` (the MLflow run id's tail, noise next to loss and tok/s)."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, int | str | float]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics


def build_trainer(
    run: TrainSpec,
    devices: DeviceSpec,
    budget: Budget,
    callbacks: list[L.Callback],
    root_dir: Path,
    checkpointing: bool,
) -> L.Trainer:
    """`root_dir`: the run's own checkpoint folder, never the working folder: Lightning looks there for
    an `hpc_ckpt_*.ckpt` to load when `fit`/`test` get no `ckpt_path` under SLURM. No logger: a run's
    own (its MLflow record) is handed over when the fit sets up (src/training/run_life.py)."""
    # Under SLURM, Lightning's auto-requeue (SIGUSR1 -> hpc_ckpt in the root folder) is off: the
    # requeue path is the run's own (src/training/preemption.py).
    slurm = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
    configure_matmul_precision(devices.matmul_precision)
    return L.Trainer(
        default_root_dir=root_dir,
        accelerator=devices.accelerator,
        devices=devices.devices,
        num_nodes=devices.num_nodes,
        strategy=run.strategy,
        precision=devices.precision,
        deterministic=run.deterministic,  # also torch's deterministic algorithms
        max_steps=budget.max_steps,
        max_epochs=-1,
        accumulate_grad_batches=budget.grad_accum,
        # Clipping happens in GPTLitModule.configure_gradient_clipping (it also records the norm).
        val_check_interval=run.val_every_n_steps * budget.grad_accum,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        # The datamodule shards training samples itself (ResumableRankSampler), resumable mid-run.
        use_distributed_sampler=False,
        logger=False,
        callbacks=callbacks,
        enable_checkpointing=checkpointing,
        enable_progress_bar=run.progress_bar,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO(), *slurm],  # a failed write never destroys the previous last.ckpt
    )


def run_datamodule(run: TrainSpec, budget: Budget, seed: int) -> TokenDataModule:
    """The DataModule a run trains on: its data config, context length, batch sizes, steps and seed.
    Lightning prepares it as the fit starts, on one process per node: the token cache is built, and
    the splits checked, before the run's MLflow record opens and outside the timed training."""
    try:
        return build_datamodule(
            run.data,
            context_length=run.seq_len,
            micro_batch_size=run.micro_batch_size,
            global_batch_size=budget.global_batch_size,
            max_steps=budget.max_steps,
            seed=seed,
        )
    except (ValueError, FileNotFoundError) as err:  # an unknown source, a glob matching nothing, ...
        raise ConfigError(str(err)) from err


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, with `src.core.atomic_io.write_checkpoint` for local paths: any
    failure leaves the previous checkpoint as it was."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # remote storage: Lightning's own transaction
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        buffer = io.BytesIO()  # serialized first: its size is what the disk must hold
        torch.save(checkpoint, buffer)
        write_checkpoint(Path(path), buffer.getbuffer())
