"""SIGTERM honoured by every rank at the same step.

Lightning's SIGTERM handler broadcasts from inside the signal handler and lets each rank raise at
the end of whichever batch it is in. With several DDP ranks (all signalled by `kill` on the process
group, or by rank 0 forwarding the signal) the ranks stop at different steps, their collectives no
longer pair up, and every rank hangs (measured: three gloo ranks on the CPU still hung 60 s after
SIGTERM, with no checkpoint and the run left RUNNING). Here the handler only records the request;
before each optimizer step the ranks agree (one all-reduce of a flag) and all stop at that same step,
so the checkpoint save that follows (`SaveOnSigterm`, written by rank 0) is a collective every
rank joins.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException


class AgreedSigterm(L.Callback):
    def __init__(self) -> None:
        self.requested = False
        # The handler in place before the run (e.g. the sweep's, which records a pre-emption): still told.
        self._outer = signal.getsignal(signal.SIGTERM)
        self._launcher: Any = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested and self._launcher is not None:
            self._launcher.kill(signum)  # rank 0 of Lightning's launcher: the ranks it started stop too
        self.requested = True
        if callable(self._outer):
            self._outer(signum, frame)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Replaces Lightning's handler for the rest of the fit; Lightning restores the previous one
        # at teardown.
        self.requested = False
        self._launcher = trainer.strategy.launcher
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        # Checked before an optimizer step's first micro-batch: the step before it is complete,
        # logged and in the checkpoint; no accumulated gradient is thrown away.
        if batch_idx % trainer.accumulate_grad_batches:
            return
        stop = self.requested
        if trainer.world_size > 1:  # every rank calls this at the same batch: a collective is safe
            flag = torch.tensor(float(stop), device=trainer.strategy.root_device)
            stop = float(trainer.strategy.reduce(flag, reduce_op="sum")) > 0
        if stop:
            raise SIGTERMException
