"""Which kernels this run's norm dispatched, recorded once when a fit starts (`src.model.dispatch`).

One forward and one backward of a copy of the model's first residual-stream norm, at the run's
activation shape (micro-batch × context rows, emb_dim wide) on the run's device, inside Lightning's
own precision context (bf16 autocast included) and compiled when the run compiles: a few ms, or
the compile of one norm when `compile` is on. The run gets a tag with the summary
(`normsweep.norm_dispatch`: `fwd=fused bwd=composite`) and `norm_dispatch.json` with the op lists;
a norm that names a fused kernel but ran a composite path prints it as a kernel finding. It never fails a run.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import lightning as L
import torch

from src.core.terminal import fit, say
from src.model.dispatch import norm_modules, record_dispatch
from src.tracking.tags import NORM_DISPATCH_TAG
from src.tracking.tracker import Tracker

NORM_DISPATCH_ARTIFACT = "norm_dispatch.json"


class NormDispatch(L.Callback):
    def __init__(self, rows: int, compile: bool) -> None:
        self.tracker: Tracker | None = None  # the run's record, once open (none: nothing to record)
        self.rows = rows
        self.compile = compile

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or self.tracker is None:
            return
        try:
            self._record(trainer, pl_module)
        except Exception as err:  # a record, not a result: the run goes on without it
            say(f"[normsweep] warning: norm dispatch not recorded: {type(err).__name__}: {err}", sys.stderr)

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model: Any = pl_module.model
        found = [m for name, m in norm_modules(model) if ".att." not in f".{name}."]  # residual stream: emb_dim wide
        if not found:
            return
        param = next(model.parameters())
        x = torch.randn(self.rows, model.cfg.emb_dim, device=param.device, dtype=param.dtype)
        assert self.tracker is not None
        d = record_dispatch(found[0], x, trainer.precision_plugin.forward_context, self.compile)
        warning = d.warning(str(model.cfg.norm_type))
        self.tracker.set_tags({NORM_DISPATCH_TAG: d.summary()})
        payload = {**d.as_dict(), "warning": warning, "rows": self.rows, "precision": str(trainer.precision)}
        self.tracker.store.log_text(self.tracker.run_id, json.dumps(payload, indent=2) + "\n", NORM_DISPATCH_ARTIFACT)
        if warning:
            # What this torch build runs on this device, found by looking: a finding about the norm, not a fault of the run.
            for line in fit([f"[normsweep] kernel finding: {warning}"]):
                print(line, file=sys.stderr, flush=True)
