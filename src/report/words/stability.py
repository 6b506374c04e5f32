"""Learning-rate stability in words (src.report.judge.stability holds the numbers): a caveat, then
per variant its largest stable learning rate, where it broke above it, and its LR sensitivity."""

from __future__ import annotations

import math

import pandas as pd

from src.report.judge.stability import largest_stable_lr
from src.report.numbers import level_text
from src.stats.inference import CONFIDENCE

HEADING = "Learning-rate stability"


def sentences(table: pd.DataFrame, sensitivity: pd.DataFrame | None = None) -> list[str]:
    """A caveat, then one line per variant: its largest stable learning rate, where it broke above it,
    and its LR sensitivity when given."""
    out = ["The learning rate was swept; each variant across its learning rates:"]
    scores = {} if sensitivity is None else {r.variant: r for r in sensitivity.itertuples()}
    for variant, best in largest_stable_lr(table).items():
        rows = table[table.variant == variant]
        broke = rows[rows.finished < rows.runs]
        where = ", ".join(f"{r.lr:.1e}" + (f" (step {int(r.stopped_at_step)})" if not math.isnan(r.stopped_at_step) else "")
                          for r in broke.itertuples())  # fmt: skip
        head = f"{variant}: largest stable learning rate {best:.1e}" if not math.isnan(best) else f"{variant}: no stable learning rate"
        tail = f"; did not finish at {where}" if where else f"; stable over the whole grid ({rows.lr.min():.1e} to {rows.lr.max():.1e})"
        score = scores.get(variant)
        if score is not None and math.isfinite(score.lr_sensitivity):
            spread = f" ± {score.ci:.3f} ({level_text(CONFIDENCE)})" if math.isfinite(score.ci) else ""
            tail += f"; LR sensitivity {score.lr_sensitivity:.3f}{spread} nats ({score.seeds} seed(s))"
        out.append(head + tail + ".")
    return out
