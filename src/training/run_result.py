"""A run's result as the console prints it: one line per run, from the run just trained or from the
MLflow run a skipped job found (`python -m src.train` returns it; a sweep prints one per job)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from src.tracking.tags import DIVERGED, FINISHED, NORM_TAG, OUTCOME_TAG

if TYPE_CHECKING:
    from src.tracking.store import Run


@dataclass
class RunResult:
    name: str  # the run's name: its variant and seed (`torch_rmsnorm · post-s1`), as in the MLflow UI
    outcome: str  # finished | diverged (| running: another process is training it)
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

        status = f"DIVERGED at step {self.diverged_at_step}" if self.outcome == DIVERGED else "ok"
        return (
            f"[normsweep] {self.name} {status} | train {self.train_time_s:.1f} s | {self.tokens_per_sec:,.0f} tok/s"
            f" | train loss {fmt(self.first_train_loss)} -> {fmt(self.final_train_loss)}"
            f" | test loss {fmt(self.test_loss)} | mlflow run {self.run_id or '-'}"
        )

    @classmethod
    def from_run(cls, run: Run) -> RunResult:
        """The result an existing MLflow run recorded (a skipped job returns it)."""
        m, tags = run.data.metrics, run.data.tags

        def get(key: str) -> float | None:
            value = m.get(key)
            return None if value is None or math.isnan(value) else float(value)

        diverged = get("diverged_at_step")
        return cls(
            name=run.info.run_name or tags.get(NORM_TAG, "?"),
            outcome=tags.get(OUTCOME_TAG, FINISHED),
            train_time_s=get("train_time_s") or 0.0,
            tokens_per_sec=get("avg_tokens_per_sec") or 0.0,
            first_train_loss=None,
            final_train_loss=get("final_train_loss"),
            test_loss=get("test_loss"),
            run_id=run.info.run_id,
            diverged_at_step=int(diverged) if diverged is not None else None,
        )
