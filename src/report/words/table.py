"""The per-variant table in words: its cells (mean ± 95% interval, dashes for no data), its headers
(the jobs' own times saying how the jobs ran: src.report.words.jobs) and table.csv's caveat column.
The numbers are src.report.read.table's (`summarize`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import pandas as pd

from src.report.numbers import aside
from src.report.read.table import JOBS_AT_ONCE, LOSS_DELTA, METRIC_LABELS
from src.report.words.common import ONE_RUN
from src.report.words.jobs import jobs_caveat, jobs_ran
from src.tracking.variants import REFERENCE_VARIANT, metric_key

# table.csv's name of the table's `speed_vs_hand`: the jobs' own tokens/s against the hand-rolled norm's,
# which ranks the machine's load between the jobs (torch_rmsnorm 1.73, torch_layernorm 0.88 on a loaded
# machine), so the name says so; the speed check's estimate is the measurement (comparisons, the report).
JOBS_SPEED_COLUMN = "jobs_tokens_per_sec_vs_hand_load_driven"
SPEED_CAVEAT = f"{JOBS_SPEED_COLUMN}_caveat"  # beside it, how the jobs were timed: "...: not a measurement"


def csv_frame(table: pd.DataFrame) -> pd.DataFrame:
    """table.csv: the table, `speed_vs_hand` named for what it is (JOBS_SPEED_COLUMN), its caveat beside it."""
    out = table.copy()
    out.columns = [JOBS_SPEED_COLUMN if c == "speed_vs_hand" else c for c in out.columns]
    out.insert(list(out.columns).index(JOBS_SPEED_COLUMN) + 1, SPEED_CAVEAT, jobs_caveat(_at_once(table)))
    return out


# --- formatting --------------------------------------------------------------------------------

_FORMATS = {"train_time_s": "{:,.1f}", "tokens_per_sec": "{:,.0f}", "test_loss": "{:.4f}"}
DASH = "—"


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
ONE_SEED = f"{ONE_RUN}, "  # one seed: not even a spread to read it against
SEQUENTIAL_SPEED_HEADER = JOBS_SPEED_HEADER.format(ONE_SEED + jobs_caveat(1))


# With a speed check, the speed column holds each pair's one estimate (the verdict's), on the row of the
# variant measured; the jobs' own times stay as what they are, with how they were timed.
CHECK_SPEED_HEADER = "step time vs its pair (speed check: the verdict's estimate)"
JOBS_ASIDE = "jobs {}"  # on the jobs' own training time and tokens/s columns
ONE_AFTER_ANOTHER = f"{JOBS_ASIDE.format(jobs_ran(1))})"  # how those columns' headers end
USER_NORM_HEADER = "norm code (class, file hash, params)"  # shown when a norm of the user's was swept


def _at_once(table: pd.DataFrame) -> int:
    """The most jobs that ran at one moment, as `summarize` read it from the runs (0, unknown, without it)."""
    return int(table[JOBS_AT_ONCE].iloc[0]) if JOBS_AT_ONCE in table and len(table) else 0


def display_rows(
    table: pd.DataFrame,
    interleaved: Mapping[str, tuple[float, float, float]] | None = None,
    pair_cells: Mapping[str, str] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """The table as text cells: mean ± 95% CI (plain mean with one seed), dashes for no data. The speed
    column is the speed check's pair estimates (`pair_cells`: the numbers its verdicts read), else an older
    bench-variants run's whole-step ratios (`interleaved`), else the jobs' own tokens/s ratio, its header
    (as the jobs' own columns') saying how they were timed and that it is not a measurement."""
    if pair_cells:
        speed = {CHECK_SPEED_HEADER: lambda r: pair_cells.get(r.variant) or DASH}
    elif interleaved:  # the interleaved measurement replaces the ratio of sequential jobs' averages
        speed = {f"interleaved speed vs {REFERENCE_VARIANT}": lambda r: interleaved_cell(interleaved.get(metric_key(r.variant)))}
    else:
        one_seed = ONE_SEED if len(table) and int(table.finished.max()) < 2 else ""
        speed = {JOBS_SPEED_HEADER.format(one_seed + jobs_caveat(_at_once(table))): _jobs_speed}
    jobs = JOBS_ASIDE.format(jobs_ran(_at_once(table)))
    # Against a reference that is not a variant here (a sweep without torch_layernorm, or whose every
    # variant also varies another axis), the column would be dashes under a name nobody ran.
    missing = len(table) > 0 and bool(table[LOSS_DELTA].isna().all())
    # header -> its cell of a row. The results lead (loss, then the speed column, then what happened to
    # the runs); the jobs' own times follow as the record they are, not as the first numbers a reader compares.
    cells: dict[str, Callable[[Any], str]] = {
        "variant": lambda r: r.variant,
        "seeds (finished/all)": lambda r: f"{r.finished}/{r.runs}",
        METRIC_LABELS["test_loss"]: lambda r: mean_cell(r, "test_loss"),
        **({} if missing else {f"test loss vs {REFERENCE_VARIANT}": _loss_vs_reference}),
        **speed,
        "notes": lambda r: r.notes,
        **{aside(METRIC_LABELS[c], jobs): partial(mean_cell, column=c) for c in ("train_time_s", "tokens_per_sec")},
        "family": lambda r: r.family,
    }
    if "norm_code" in table and table.norm_code.astype(bool).any():  # a norm of the user's was swept
        cells[USER_NORM_HEADER] = lambda r: r.norm_code or "built-in"
    return list(cells), [[cell(r) for cell in cells.values()] for r in table.itertuples(index=False)]


def mean_cell(r: Any, column: str) -> str:
    """A run column's mean ± its 95% CI half-width, at the column's precision."""
    mean, ci, fmt = getattr(r, column), getattr(r, f"{column}_ci"), _FORMATS[column]
    if math.isnan(mean):
        return DASH
    return fmt.format(mean) if math.isnan(ci) else f"{fmt.format(mean)} ± {fmt.format(ci)}"


def _loss_vs_reference(r: Any) -> str:
    delta = getattr(r, LOSS_DELTA)
    return DASH if math.isnan(delta) else "ref" if r.variant == REFERENCE_VARIANT else f"{delta:+.4f}"


def _jobs_speed(r: Any) -> str:
    return DASH if math.isnan(r.speed_vs_hand) else "ref" if r.variant == r.speed_reference else f"{r.speed_vs_hand - 1:+.1%}"
