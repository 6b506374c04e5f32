"""The study's table, from one row per run (the paired comparisons are in `comparisons`).

Each run carries its variant's family (the `norm_family` tag, from `family:` in conf/norm/<key>.yaml),
and the table is grouped by it. Within a family the written-out variant (`hand_<family>`, or the
family's own name: `dyt`, `scalenorm`) is the reference every other implementation is timed and
compared against, so a new variant such as `fast_dyt` is compared against `dyt` without touching
this module. Test losses are relative to `REFERENCE_VARIANT` (src.tracking.variants), and the
reference of each family proposed to replace it (`ALTERNATIVES`) is compared against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from src.core.tables import markdown_table, text_table  # noqa: F401  (the report's writers)
from src.report.read.timing import most_at_once
from src.report.words.jobs import jobs_caveat, jobs_ran
from src.stats.inference import mean_ci
from src.tracking.tags import DIVERGED, FAILED, FINISHED, INTERRUPTED_OUTCOMES, RUNNING
from src.tracking.variants import REFERENCE_VARIANT, metric_key

FAMILIES = ("layernorm", "rmsnorm", "dyt", "scalenorm", "none")  # the table's order; others follow
NO_KERNEL = ("none",)  # families with nothing to time (the identity)
ALTERNATIVES = ("dyt", "scalenorm")  # families proposed to replace LayerNorm
HAND = "hand"  # the implementation every other one in its family is timed against
VALUE_COLUMNS = ("train_time_s", "tokens_per_sec", "test_loss")
METRIC_LABELS = {"train_time_s": "training time (s)", "tokens_per_sec": "tokens/s", "test_loss": "test loss"}
UNKNOWN = "unknown"  # the family of a run recorded without a norm_family tag
AXIS_PREFIX = "axis."  # a runs frame's column per swept axis, with the run's value: "axis.model.norm_placement"
JOBS_AT_ONCE = "jobs_at_once"  # the most jobs that ran at one moment (src.report.words.jobs.most_at_once)
SPEED_CAVEAT = "speed_vs_hand_caveat"  # table.csv: beside speed_vs_hand, how the jobs were timed: "...: not a measurement"


@dataclass(frozen=True)
class Variant:
    key: str
    family: str  # the run's norm_family tag: "layernorm", "rmsnorm", "dyt", "none", ...

    @property
    def impl(self) -> str:
        """"hand", "torch", "fast", ...: the key before `_<family>`; the family's own name is written out."""
        if self.key == self.family:
            return HAND
        suffix = f"_{self.family}"
        return self.key[: -len(suffix)] if self.key.endswith(suffix) else self.key

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
    for outcome in (DIVERGED, FAILED, RUNNING, *INTERRUPTED_OUTCOMES):
        hit = runs[runs.outcome == outcome]
        if hit.empty:
            continue
        steps = [f"{int(s)}" for s in hit.stopped_at_step if pd.notna(s)]
        where = "" if not steps else f" at step {steps[0]}" if len(steps) == 1 else f" (steps {', '.join(steps)})"
        count = "" if len(hit) == len(runs) else f"{len(hit)}/{len(runs)} "
        notes.append(f"{count}{outcome}{where}")
    return "; ".join(notes)


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
    speed = means.tokens_per_sec
    loss_ref = means.test_loss.get(REFERENCE_VARIANT, math.nan)
    table["speed_vs_hand"] = [
        speed[key] / speed[base] if base in speed else math.nan
        for key, base in zip(table.variant, table.speed_reference, strict=True)
    ]
    # The ratio is of jobs' own tokens/s: table.csv says how they were timed beside it, as the page's header does.
    at_once = most_at_once(runs)
    table[SPEED_CAVEAT] = jobs_caveat(at_once)
    table[JOBS_AT_ONCE] = at_once
    table["test_loss_vs_" + REFERENCE_VARIANT] = table.test_loss - loss_ref
    return table


# --- formatting --------------------------------------------------------------------------------

_FORMATS = {"train_time_s": "{:,.1f}", "tokens_per_sec": "{:,.0f}", "test_loss": "{:.4f}"}
DASH = "—"


def with_ci(mean: float, ci: float, fmt: str) -> str:
    if math.isnan(mean):
        return DASH
    return fmt.format(mean) if math.isnan(ci) else f"{fmt.format(mean)} ± {fmt.format(ci)}"


def interleaved_cell(ratio: tuple[float, float, float] | None) -> str:
    """Speed relative to torch_layernorm from interleaved rounds (the inverse of the step-time
    ratio `(median, low, high)`), with its 95% interval: -9.5% is 9.5% slower."""
    if ratio is None or math.isnan(ratio[0]):
        return DASH
    mid, low, high = ratio
    if mid == 1 and low == high == 1:
        return "ref"
    return f"{1 / mid - 1:+.1%} [{1 / high - 1:+.1%}, {1 / low - 1:+.1%}]"


# The jobs' tokens/s ratio, whatever the seed count, says how the jobs were timed (src.report.words.jobs):
# one after another it is the machine's load between jobs, at once each other's load; never the norm's.
JOBS_SPEED_HEADER = "jobs' tokens/s vs hand-rolled ({})"
ONE_RUN_EACH = "one run each, "  # one seed: not even a spread to read it against
SEQUENTIAL_SPEED_HEADER = JOBS_SPEED_HEADER.format(ONE_RUN_EACH + jobs_caveat(1))


# With a speed check, the speed column holds each pair's one estimate (the verdict's), on the row of the
# variant measured; the jobs' own times stay as what they are, with how they were timed.
CHECK_SPEED_HEADER = "step time vs its pair (speed check: the verdict's estimate)"
JOBS_SUFFIX = " (jobs {})"  # on the jobs' own training time and tokens/s columns
ONE_AFTER_ANOTHER = JOBS_SUFFIX.format(jobs_ran(1))
USER_NORM_HEADER = "norm code (class, file hash, params)"  # shown when a norm of the user's was swept


def _at_once(table: pd.DataFrame) -> int:
    """The most jobs that ran at one moment, as `summarize` read it from the runs (0, unknown, without it)."""
    return int(table[JOBS_AT_ONCE].iloc[0]) if JOBS_AT_ONCE in table and len(table) else 0


def display_rows(
    table: pd.DataFrame,
    interleaved: Mapping[str, tuple[float, float, float]] | None = None,
    pair_cells: Mapping[str, str] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """The table as text cells: mean ± 95% CI (plain mean with one seed), dashes for no data.

    With `pair_cells` (variant -> its pairs' speed estimates, from the speed check's norms) the speed
    column is those, the very numbers the speed verdicts read; else with `interleaved` (whole-step
    ratios from an older bench-variants run) each variant's step speed relative to torch_layernorm;
    without either, the ratio of the jobs' own tokens/s, its header saying how they were timed and
    that it is not a measurement (any seed count). The jobs' own columns say how they were timed.
    """
    loss_delta = "test_loss_vs_" + REFERENCE_VARIANT
    headers = [
        "variant",
        "seeds (finished/all)",
        *(METRIC_LABELS[c] for c in VALUE_COLUMNS),
        "speed vs hand-rolled",
        f"test loss vs {REFERENCE_VARIANT}",
        "notes",
        "family",
    ]
    rows = []
    for r in table.itertuples(index=False):
        baseline = r.speed_reference
        speed = DASH if math.isnan(r.speed_vs_hand) else "ref" if r.variant == baseline else f"{r.speed_vs_hand - 1:+.1%}"
        delta = getattr(r, loss_delta)
        loss = DASH if math.isnan(delta) else "ref" if r.variant == REFERENCE_VARIANT else f"{delta:+.4f}"
        values = [with_ci(getattr(r, c), getattr(r, f"{c}_ci"), _FORMATS[c]) for c in VALUE_COLUMNS]
        rows.append([r.variant, f"{r.finished}/{r.runs}", *values, speed, loss, r.notes, r.family])
    sequential = headers.index("speed vs hand-rolled")
    for column in ("train_time_s", "tokens_per_sec"):
        headers[headers.index(METRIC_LABELS[column])] += JOBS_SUFFIX.format(jobs_ran(_at_once(table)))
    if pair_cells:
        headers[sequential] = CHECK_SPEED_HEADER
        for row in rows:
            row[sequential] = pair_cells.get(row[0]) or DASH
    elif interleaved:
        # The interleaved measurement replaces the ratio of sequential jobs' averages.
        headers[sequential] = f"interleaved speed vs {REFERENCE_VARIANT}"
        for row in rows:
            row[sequential] = interleaved_cell(interleaved.get(metric_key(row[0])))
    else:
        one_seed = ONE_RUN_EACH if len(table) and int(table.finished.max()) < 2 else ""
        headers[sequential] = JOBS_SPEED_HEADER.format(one_seed + jobs_caveat(_at_once(table)))
    if "norm_code" in table and table.norm_code.astype(bool).any():  # a norm of the user's was swept
        headers.append(USER_NORM_HEADER)
        for row, code in zip(rows, table.norm_code, strict=True):
            row.append(code or "built-in")
    # The results lead (loss, then the speed column, then what happened to the runs); the jobs' own
    # times follow as the record they are, not as the first numbers a reader compares.
    order = [0, 1, headers.index(METRIC_LABELS["test_loss"]), headers.index(f"test loss vs {REFERENCE_VARIANT}"), sequential, headers.index("notes")]
    order += [i for i in range(len(headers)) if i not in order]
    return [headers[i] for i in order], [[row[i] for i in order] for row in rows]
