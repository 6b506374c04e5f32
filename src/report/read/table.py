"""The study's table, from one row per run (the paired comparisons are in `comparisons`).

Each run carries its variant's family (the `norm_family` tag, from `family:` in conf/norm/<key>.yaml),
and the table is grouped by it. Within a family the written-out variant (`hand_<family>`, or the
family's own name: `dyt`, `scalenorm`) is the reference every other implementation is timed and
compared against, so a new variant such as `fast_dyt` is compared against `dyt` without touching
this module. Test losses are relative to `REFERENCE_VARIANT` (src.tracking.variants).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from src.report.read.timing import most_at_once
from src.stats.inference import mean_ci
from src.tracking.tags import DIVERGED, EVAL_NOT_FINITE, FAILED, FINISHED, INTERRUPTED_OUTCOMES, RUNNING
from src.tracking.variants import REFERENCE_VARIANT

FAMILIES = ("layernorm", "rmsnorm", "dyt", "scalenorm", "none")  # the table's order; others follow
NO_KERNEL = ("none",)  # families with nothing to time (the identity)
HAND = "hand"  # the implementation every other one in its family is timed against
VALUE_COLUMNS = ("train_time_s", "tokens_per_sec", "test_loss")
METRIC_LABELS = {"train_time_s": "training time (s)", "tokens_per_sec": "tokens/s", "test_loss": "test loss"}
UNKNOWN = "unknown"  # the family of a run recorded without a norm_family tag
AXIS_PREFIX = "axis."  # a runs frame's column per swept axis, with the run's value: "axis.model.norm_placement"
LOSS_DELTA = f"test_loss_vs_{REFERENCE_VARIANT}"  # each variant's mean test loss minus the reference's
JOBS_AT_ONCE = "jobs_at_once"  # the most jobs that ran at one moment (src.report.words.jobs.most_at_once)


@dataclass(frozen=True)
class Variant:
    key: str
    family: str  # the run's norm_family tag: "layernorm", "rmsnorm", "dyt", "none", ...

    @property
    def impl(self) -> str:
        """"hand", "torch", "fast", ...: the key before `_<family>`; the family's own name is written out."""
        return HAND if self.key == self.family else self.key.removesuffix(f"_{self.family}")

    @property
    def is_reference(self) -> bool:
        return self.impl == HAND and self.family not in NO_KERNEL


def families_of(frame: pd.DataFrame) -> dict[str, str]:
    """variant -> family from a frame with `variant` (and `family`) columns."""
    if "family" not in frame:
        return dict.fromkeys(frame.variant, UNKNOWN)
    return dict(zip(frame.variant, frame.family.fillna(UNKNOWN), strict=True))


def parse_variant(key: str, families: Mapping[str, str]) -> Variant:
    return Variant(key, families.get(key, UNKNOWN))


def references(families: Mapping[str, str]) -> dict[str, str]:
    """family -> its reference variant, among the variants present."""
    return {v.family: v.key for v in (parse_variant(k, families) for k in families) if v.is_reference}


def variant_order(frame: pd.DataFrame) -> list[str]:
    """The variants of a frame with `variant` (and `family`, or the runs' `variant_rank`) columns, in the table's order."""
    if "variant_rank" in frame and len(frame):
        return list(dict.fromkeys(frame.sort_values("variant_rank", kind="stable").variant))
    return order_of(families_of(frame))


def order_of(families: Mapping[str, str]) -> list[str]:
    """Grouped by family (LayerNorm, RMSNorm, DyT, ScaleNorm, none, others), written-out first, then built-in."""

    def rank(key: str) -> tuple[int, str, int, str]:
        v = parse_variant(key, families)
        family = FAMILIES.index(v.family) if v.family in FAMILIES else len(FAMILIES)
        impl = {HAND: 0, "torch": 1}.get(v.impl, 2)
        return family, v.family, impl, key

    return sorted(families, key=rank)


def _stopped_note(runs: pd.DataFrame) -> str:
    """'diverged at step 530', or '2/3 diverged (steps 120, 340)'; failed, running and interrupted
    (pre-empted, lost, killed) runs alike."""
    notes = []
    for outcome in (DIVERGED, EVAL_NOT_FINITE, FAILED, RUNNING, *INTERRUPTED_OUTCOMES):
        hit = runs[runs.outcome == outcome]
        if hit.empty:
            continue
        steps = [f"{int(s)}" for s in hit.stopped_at_step if pd.notna(s)]
        where = "" if not steps else f" at step {steps[0]}" if len(steps) == 1 else f" (steps {', '.join(steps)})"
        count = "" if len(hit) == len(runs) else f"{len(hit)}/{len(runs)} "
        notes.append(f"{count}{outcome}{where}")
    return "; ".join(notes)


def most_seeds(runs: pd.DataFrame) -> int:
    """The most distinct seeds any one variant of `runs` has (0 without runs): pass the finished runs
    alone for the seeds that finished."""
    return int(runs.groupby("variant").seed.nunique().max()) if len(runs) else 0


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: mean and 95% CI half-width of each column over its finished runs."""
    rows = []
    families = families_of(runs)
    refs = references(families)
    for key in variant_order(runs):
        of_variant = runs[runs.variant == key]
        finished = of_variant[of_variant.outcome == FINISHED]
        row: dict[str, object] = {"variant": key, "runs": len(of_variant), "finished": len(finished)}
        if "norm" in of_variant:  # the norm it runs: the study's table finds a norm's variants by it
            row["norm"] = of_variant.norm.iloc[0]
        for column in VALUE_COLUMNS:
            est = mean_ci(finished[column])
            row[column], row[f"{column}_ci"] = est.mean, est.ci
        row["notes"] = _stopped_note(of_variant)
        row["family"] = families[key]
        # A norm of the user's: its class, file hash (or package) and parameters, as its runs recorded them
        row["norm_code"] = ", ".join(dict.fromkeys(of_variant.norm_code)) if "norm_code" in of_variant else ""
        row["speed_reference"] = refs.get(families[key])
        rows.append(row)
    table = pd.DataFrame(rows)
    means = table.set_index("variant")
    table["speed_vs_hand"] = table.tokens_per_sec / table.speed_reference.map(means.tokens_per_sec)
    # The ratio is of jobs' own tokens/s: how they ran in time goes beside it (src.report.words.table says it).
    table[JOBS_AT_ONCE] = most_at_once(runs)
    table[LOSS_DELTA] = table.test_loss - means.test_loss.get(REFERENCE_VARIANT, math.nan)
    return table
