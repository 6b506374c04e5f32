"""The run's bookkeeping, held by callbacks rather than by the model's LightningModule.

`RunTracking` owns what makes a run resumable as one MLflow run: the run id, the run's identity
and the training clock across segments. Lightning saves its `state_dict` in every checkpoint under
`checkpoint["callbacks"]["RunTracking"]` and restores it on resume.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

from src.core.schema import ScoredWeights
from src.tracking.identity import RUN_STATE_KEY
from src.tracking.tracker import Tracker
from src.training.best_weights import BestTrainLoss
from src.training.checkpointing import SaveOnSigterm, periodic_checkpoint
from src.training.divergence import DivergenceMonitor
from src.training.norm_dispatch import NormDispatch
from src.training.preemption import AgreedSigterm
from src.training.run_spec import RunSpec


class ProgressBar(TQDMProgressBar):
    """Lightning's bar without `v_num` (the MLflow run id's tail, noise next to loss and tok/s)."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, int | str | float]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics


class RunTracking(L.Callback):
    def __init__(self, tracker: Tracker | None, fingerprint: str, identity: dict[str, Any], heartbeat_s: float) -> None:
        self.tracker = tracker
        self.fingerprint = fingerprint
        self.identity = identity
        self.heartbeat_s = heartbeat_s
        self.prior_train_time_s = 0.0  # training time of earlier segments of this run
        self._fit_started: float | None = None
        self._fit_ended: float | None = None

    @property
    def state_key(self) -> str:
        return RUN_STATE_KEY

    def train_time_s(self) -> float:
        """Training wall-clock over every segment of this run (resumes included), up to the end of the
        fit: the test that follows is not training."""
        now = self._fit_ended or time.perf_counter()
        return self.prior_train_time_s + (now - (self._fit_started or now))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_started, self._fit_ended = time.perf_counter(), None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_ended = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.tracker is not None:
            self.tracker.heartbeat(self.heartbeat_s)

    def state_dict(self) -> dict[str, Any]:
        return {
            "mlflow_run_id": self.tracker.run_id if self.tracker else None,
            "train_time_s": self.train_time_s(),
            "fingerprint": self.fingerprint,
            "identity": self.identity,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.prior_train_time_s = float(state_dict.get("train_time_s", 0.0))


class RunCallbacks:
    """The run's callbacks, held by name (Lightning reorders and extends the list it is given)."""

    def __init__(self, spec: RunSpec) -> None:
        self.divergence = DivergenceMonitor()
        fp, identity = spec.identity.fingerprint, spec.identity.config
        self.tracking = RunTracking(None, fp, identity, heartbeat_s=spec.store.heartbeat_s)
        self.periodic = periodic_checkpoint(spec.checkpoint)
        self.sigterm = SaveOnSigterm(spec.checkpoint.write_folder)
        self.agreed_sigterm = AgreedSigterm()
        self.progress = ProgressBar() if spec.train.progress_bar else None
        train = spec.train
        # Which kernels the norm ran, recorded once the model is on its device (a run with a record only).
        self.dispatch = NormDispatch(train.micro_batch_size * train.seq_len, train.compile)
        # The study's scored weights: the checkpoint with the lowest mean training loss (src/training/best_weights.py).
        self.best = BestTrainLoss(spec.budget.max_steps) if train.test_weights == ScoredWeights.BEST_TRAIN_LOSS else None
        self.extra: list[L.Callback] = []  # e.g. fault injection in the tests

    def attach(self, tracker: Tracker) -> None:
        """The run's MLflow record, once it is open, to the callbacks that write to it."""
        self.tracking.tracker = self.dispatch.tracker = tracker

    def all(self) -> list[L.Callback]:
        found = [
            # The dispatch record (a few ms, or one norm's compile) before the training clock starts.
            # The best weights booked before a checkpoint of the same step is written (it carries them).
            *self.extra, self.dispatch, self.best, self.divergence, self.tracking, self.periodic, self.sigterm,
            self.agreed_sigterm, self.progress,
        ]  # fmt: skip
        return [c for c in found if c is not None]
