"""Learning-rate stability: final loss against learning rate per variant, and where each one breaks.

A sweep over `optim.lr` (`experiment=lr_stability`) holds several learning rates per variant; this
module turns its runs into one row per variant and learning rate, each variant's largest stable
learning rate (every seed run at it finished), and the LR-sensitivity score of Wortsman et al. 2023
(docs/sequential.md, "Learning-rate sensitivity", defines it): a run that diverged or failed counts
at its initial loss, so a variant that trains well over the whole grid scores near 0.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from src.report.read.table import variant_order
from src.stats.inference import mean_ci
from src.tracking.tags import FINISHED


def across_lrs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with each one's variant apart from the learning rate (`lr_variant`, src.report.read.runs):
    a learning-rate sweep's variants are its other axes, each traced across the learning rates."""
    return runs.assign(variant=runs.lr_variant) if "lr_variant" in runs else runs


def is_lr_sweep(runs: pd.DataFrame) -> bool:
    """Whether some variant was trained at more than one learning rate."""
    runs = across_lrs(runs)
    return "lr" in runs and bool((runs.dropna(subset=["lr"]).groupby("variant").lr.nunique() > 1).any())


def by_learning_rate(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, lr): runs, finished, mean test loss of the finished, first diverged step."""
    runs = across_lrs(runs)
    done = runs.outcome == FINISHED
    # A run's loss counts where it finished, its stopping step where it did not.
    loss, stop = runs.test_loss.astype(float).where(done), runs.stopped_at_step.where(~done)
    groups = runs.assign(finished=done, test_loss=loss, stop=stop).groupby(["variant", "lr"], sort=False)
    table = groups.agg(runs=("finished", "size"), finished=("finished", "sum"), test_loss=("test_loss", "mean"),
                       stopped_at_step=("stop", "min")).reset_index()  # fmt: skip
    rank = {v: i for i, v in enumerate(variant_order(runs))}  # grouped by family, as the main table
    table = table.assign(lr=table.lr.astype(float), rank=table.variant.map(rank)).sort_values(["rank", "lr"])
    return table.drop(columns="rank").reset_index(drop=True)


def largest_stable_lr(table: pd.DataFrame) -> dict[str, float]:
    """variant -> the largest learning rate at which every run finished (NaN if none did)."""
    stable = table[table.finished == table.runs]
    return {v: float(stable[stable.variant == v].lr.max()) if (stable.variant == v).any() else math.nan for v in table.variant.unique()}


def initial_losses(curves: pd.DataFrame, metric: str = "train/train_loss") -> dict[str, float]:
    """run_id -> its first logged training loss (the loss the run started from)."""
    rows = curves[curves.metric == metric] if len(curves) else curves
    if not len(rows):
        return {}
    first = rows.sort_values("step", kind="stable").drop_duplicates("run_id")
    return dict(zip(first.run_id, first.value.astype(float), strict=True))


def lr_sensitivity(runs: pd.DataFrame, initial: dict[str, float]) -> pd.DataFrame:
    """Per variant: Wortsman et al.'s LR sensitivity (mean over seeds, 95% half-width, seeds)."""
    runs = across_lrs(runs)
    rows = []
    for variant, group in runs.groupby("variant", sort=False):
        scores = []
        for _, seed_runs in group.groupby("seed"):
            start = seed_runs.run_id.map(initial).astype(float)
            ok = (seed_runs.outcome == FINISHED) & np.isfinite(seed_runs.test_loss.astype(float))
            final = seed_runs.test_loss.astype(float).where(ok, np.inf)  # diverged: no better than the start
            if seed_runs.lr.nunique() < 2 or not ok.any() or start.isna().any():
                continue
            scores.append(float(np.minimum(final, start).mean() - final[ok].min()))
        est = mean_ci(scores)
        rows.append({"variant": variant, "lr_sensitivity": est.mean, "ci": est.ci, "seeds": est.n})
    return pd.DataFrame(rows, columns=["variant", "lr_sensitivity", "ci", "seeds"])
