"""One run in Lightning: the Trainer and the data it fits, and the run's life around the fit.

`RunLife.plan` asks src/tracking/run_plan.py what the job is (done / resume / settle / supersede /
new, decided once per job); as a Lightning callback, `RunLife` opens the run's MLflow record when the
fit sets up and closes it with the fit's outcome, whatever way training ends (finished, diverged,
pre-empted, interrupted, failed). `build_trainer` and `run_datamodule` are the Trainer and the
DataModule as every run (and benchmark) builds them.
"""

from __future__ import annotations

import io
import logging
import math
import signal
import warnings
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from src.core.atomic_io import CheckpointSpaceError, write_checkpoint
from src.core.budget import Budget
from src.core.cli import in_multirun
from src.core.devices import DeviceSpec, configure_matmul_precision
from src.core.interrupts import OneCtrlC
from src.core.memory_peak import JOB_PEAK, PROCESS_PEAK, high_water_mb, process_peak_mb, reset_peak
from src.core.paths import ConfigError
from src.core.terminal import say
from src.data.datamodule import TokenDataModule, build_datamodule
from src.tracking.identity import LAST
from src.tracking.record import RunResult
from src.tracking.run_plan import RunPlan, decided_once, open_tracker, plan_run, release
from src.tracking.store import Store
from src.tracking.tags import DIVERGED, EARLIER_TRAIN_TIME, EVAL_NOT_FINITE, FINISHED
from src.tracking.tracker import TokenCacheRef, Tracker
from src.training.callbacks import RunCallbacks
from src.training.failures import failed_after_recording, keep_traceback, route_store_errors_to_log
from src.training.preemption import SLURM_WARNINGS, requeue_this_job, slurm_job_id
from src.training.run_spec import RunSpec, TrainSpec

if TYPE_CHECKING:
    from src.training.lit_module import GPTLitModule


# --- the Trainer and the DataModule, as every run and benchmark builds them


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


# --- a multirun's processes, which only SLURM or torchrun may start


def check_not_relaunching_sweep(world_size: int) -> None:
    """Refuse multi-process jobs inside a multirun unless SLURM or torchrun made the processes.

    Lightning's DDP launcher starts the other ranks by re-running sys.argv, which inside a Hydra
    multirun holds `-m` and the sweep lists: every rank would start the whole sweep again.
    """
    if world_size == 1 or not in_multirun():
        return
    if SLURMEnvironment.detect() or TorchElasticEnvironment.detect():
        return
    raise ConfigError(
        f"cluster: {world_size} processes inside a multirun (-m): Lightning would re-run the command line "
        "and every process would restart the sweep; use cluster=gpu_node (torchrun starts each job's "
        "processes), cluster=slurm, or run one job per command (docs/scaling.md)"
    )



def describe(result: RunResult) -> str:
    """The run's one-paragraph description (its note in the MLflow UI)."""
    test = f"test loss {result.test_loss:.4f}" if result.test_loss is not None else "no test loss"
    outcome = (
        result.status_word().lower() if result.outcome in (DIVERGED, EVAL_NOT_FINITE) else result.outcome
    )
    return (
        f"**{result.name}**: {outcome}; {test}; trained {result.train_time_s:,.1f} s at "
        f"{result.tokens_per_sec:,.0f} tokens/s (run average)."
    )


def final_metrics(
    result: RunResult, module: GPTLitModule, steps_done: int, budget: Budget, own_peak: bool = False
) -> dict[str, float]:
    """The run's headline numbers and its test loss, logged once (at the tracker's summary step).
    `own_peak`: the CPU's peak resident size was reset as this job's fit started (src/core/memory_peak.py)."""
    final = {
        "train_time_s": result.train_time_s,
        "avg_tokens_per_sec": result.tokens_per_sec,  # the study's definition: tokens / training time
        **peak_memory(module.device, own_peak),
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


def peak_memory(device: torch.device, own_peak: bool) -> dict[str, float]:
    """The job's peak memory under its one name; on a CPU whose peak could not be reset as the job
    started, the process's running peak under another name (in a sequential multirun it is every
    earlier job's too)."""
    if device.type == "cuda":
        return {JOB_PEAK: torch.cuda.max_memory_allocated(device) / 2**20}
    job = high_water_mb() if own_peak else None
    return {JOB_PEAK: job} if job is not None else {PROCESS_PEAK: process_peak_mb()}



# --- the run's life as one object: planned, opened as the fit starts, closed with its outcome
class RunLife(L.Callback):
    """One run from its plan to its close, for `train()`:

        life = RunLife.plan(spec)       # done / resume / settle / supersede / new, decided once per job
        with life:                      # closed with its outcome however the fit ends; the claim let go
            trainer = build_trainer(..., callbacks=life.callbacks())
            trainer.fit(..., ckpt_path=life.ckpt_path)
            result = life.finish(trainer, module)

    As a callback it opens the run's MLflow record when Lightning sets the fit up (after the data is
    prepared, before the first step, as Lightning's own loggers open theirs) and hands the Trainer its
    logger; the run's other callbacks (tracking, divergence, checkpoints, pre-emption) are its own.
    """

    def __init__(self, spec: RunSpec, store: Store | None, plan: RunPlan) -> None:
        self.spec, self.store, self.plan = spec, store, plan
        self.tracker: Tracker | None = None
        self.run = RunCallbacks(spec)
        self.outcome: str | None = None
        self.note: str | None = None
        self.fitting = False  # the Trainer set the fit up: what fails from here on is the run's
        self.own_peak = False  # the CPU's peak resident size was reset as the fit started
        self._sigint: OneCtrlC | None = None  # held while the run is live (`with life:`)

    @classmethod
    def plan(cls, spec: RunSpec) -> RunLife:
        """Open the store (checked in seconds, once for the whole job) and ask src/tracking/run_plan.py
        what this job is; with several processes, rank 0 decides and the others follow."""
        devices = spec.devices
        check_not_relaunching_sweep(devices.world_size)  # a refusal of the config, before the store is opened
        quiet_lightning()
        route_store_errors_to_log()
        store = Store.connect(spec.store.tracking_uri) if spec.store.enabled else None
        plan = decided_once(lambda: plan_run(spec, in_multirun(), store), devices.world_size, devices.device_type)
        if plan.message:
            say(f"[normsweep] {plan.message}")
        return cls(spec, store, plan)

    @property
    def done(self) -> RunResult | None:
        """The job's result when there is nothing to train."""
        return self.plan.done

    @property
    def ckpt_path(self) -> Path | None:
        return self.plan.ckpt_path

    @property
    def diverged(self) -> bool:
        return self.run.divergence.diverged

    def callbacks(self) -> list[L.Callback]:
        return [self, *self.run.all()]

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.fitting:  # this run's peak: sequential multirun jobs share the process
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            self.own_peak = reset_peak()
        self.fitting = True
        if self.store is None or self.tracker is not None:
            return
        self.tracker = tracker = open_tracker(self.spec, self.store, self.plan, trainer.strategy.root_device.type)
        self.run.attach(tracker)
        trainer.loggers = [tracker.logger]
        module, data = pl_module, trainer.datamodule
        stats = {"n_params": module.stats.n_params, "flops_per_token": module.stats.flops_per_token}
        tracker.log_inputs(
            {**stats, **{f"budget.{k}": v for k, v in asdict(module.budget).items()}},
            TokenCacheRef(data.source.cache_key, data.folder, data.used_splits),
        )

    def finish(self, trainer: L.Trainer, module: GPTLitModule) -> RunResult:
        """The run's result from its fit and test, its final metrics recorded; closed FINISHED (or
        diverged) when the `with` block ends."""
        budget, tracking, monitor, tracker = module.budget, self.run.tracking, self.run.divergence, self.tracker
        train_time_s = tracking.train_time_s()
        test_loss = None if monitor.diverged else module.test_loss
        eval_broken = monitor.val_not_finite_at_step is not None or (
            test_loss is not None and not math.isfinite(test_loss)
        )
        result = RunResult(
            name=self.spec.shown_name,  # the MLflow run's: its variant, apart
            outcome=DIVERGED if monitor.diverged else EVAL_NOT_FINITE if eval_broken else FINISHED,
            train_time_s=train_time_s,
            tokens_per_sec=trainer.global_step * budget.tokens_per_step / train_time_s,
            first_train_loss=module.first_train_loss,
            final_train_loss=monitor.last_finite_loss if monitor.diverged else module.last_train_loss,
            test_loss=test_loss,
            run_id=tracker.run_id if tracker else None,
            diverged_at_step=monitor.diverged_at_step,
            val_not_finite_at_step=monitor.val_not_finite_at_step,
        )
        final = final_metrics(result, module, trainer.global_step, budget, self.own_peak)
        if tracking.prior_train_time_s > 0:  # resumed: what earlier attempts trained (src/launch/time_split.py)
            final[EARLIER_TRAIN_TIME] = tracking.prior_train_time_s
        best = self.run.best
        if result.test_loss is not None and best is not None and best.best_step is not None:
            final["test_weights_step"] = float(best.best_step)  # the step whose weights the test loss scored
        self.outcome, self.note = result.outcome, describe(result)  # closed with them when the `with` ends
        if tracker:
            tracker.log_final(final)
        return result

    # --- the close: the run's outcome, whatever way training ends
    def _close(self, outcome: str, note: str | None = None) -> None:
        if self.tracker is not None:
            self.tracker.close(outcome, note=note)

    def _checkpoint(self) -> Path | None:
        folder = self.run.sigterm.dirpath
        return folder / LAST if folder is not None else None

    def _resume_hint(self) -> str:
        if self.tracker is None and self.store is not None:  # stopped while Lightning prepared the data
            return "its MLflow run was not open yet, so nothing was recorded; re-run the same command to start it"
        last = self._checkpoint()
        if last is not None and last.is_file():
            return f"run closed as killed; re-run the same command to continue from {last}"
        return "run closed as killed; no checkpoint (checkpoint.enabled=false), so a re-run starts over"

    def _fail(self, err: BaseException) -> None:
        """Close the run FAILED, then raise the one line that says what happened and how to go on."""
        if isinstance(err, CheckpointSpaceError):  # its own line says it all (src/train.py prints it)
            self._close("failed", str(err))
            return
        tracker = self.tracker
        if tracker is None and (self.store is not None or not self.fitting):  # nothing was recorded
            return
        db = tracker.store.db if tracker is not None else None
        failure = failed_after_recording(err, self.spec.run_name, tracker.run_id if tracker else None, self._checkpoint(), db)
        if not failure.store_broken:  # a store that broke cannot record its own failure
            try:
                self._close("failed")
            except Exception as close_err:  # the original error is the one to report
                keep_traceback(close_err)
        raise failure from err

    def __enter__(self) -> RunLife:
        self._sigint = OneCtrlC.install()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> bool:
        release(self.plan)  # a fit that stopped before its run opened still lets go of the claim
        try:
            return self._end(err)
        finally:
            if self._sigint is not None:
                self._sigint.restore()

    def _end(self, err: BaseException | None) -> bool:
        name = self.spec.run_name
        if err is None:
            self._close(self.outcome or "failed", self.note)
        elif isinstance(err, SIGTERMException):
            self._close("preempted")
            saved = self.run.sigterm.saved
            if rank_zero_only.rank == 0:  # one line, not one per DDP rank; one requeue per job
                then = requeue_this_job() if slurm_job_id() and saved else "re-run the same command to resume"
                where = f"checkpoint saved at {saved}; {then}" if saved else "no checkpoint (checkpoint.enabled=false)"
                say(f"[normsweep] {name} stopped by {self.run.agreed_sigterm.signal_name or 'SIGTERM'}: {where}")
            if slurm_job_id():  # stopped and saved: SLURM's repeated warnings must not kill the exit
                for sig in SLURM_WARNINGS:
                    signal.signal(sig, signal.SIG_IGN)
            # No result is left for a launcher that waits for one (submitit): the requeued job gives it.
            raise SystemExit(0) from None
        elif isinstance(err, (KeyboardInterrupt, SystemExit)):
            self._close("killed")
            # Lightning turns Ctrl+C into a silent sys.exit(1): say what happened and how to go on.
            interrupted = isinstance(err, KeyboardInterrupt) or err.code not in (0, None)
            if interrupted and rank_zero_only.rank == 0:
                say(f"[normsweep] {name} interrupted (Ctrl+C): {self._resume_hint()}")
        elif isinstance(err, Exception):
            self._fail(err)
        else:
            self._close("failed")
        return False
