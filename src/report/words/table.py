"""The per-variant table in words: its cells (mean ± 95% interval, dashes for no data), its headers
(the jobs' own times saying how the jobs ran: src.report.words.jobs) and table.csv's caveat column.
The numbers are src.report.read.table's (`summarize`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from src.report.numbers import aside
from src.report.read.table import JOBS_AT_ONCE, METRIC_LABELS, VALUE_COLUMNS
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
        label = METRIC_LABELS[column]
        headers[headers.index(label)] = aside(label, JOBS_ASIDE.format(jobs_ran(_at_once(table))))
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
        one_seed = ONE_SEED if len(table) and int(table.finished.max()) < 2 else ""
        headers[sequential] = JOBS_SPEED_HEADER.format(one_seed + jobs_caveat(_at_once(table)))
    if "norm_code" in table and table.norm_code.astype(bool).any():  # a norm of the user's was swept
        headers.append(USER_NORM_HEADER)
        for row, code in zip(rows, table.norm_code, strict=True):
            row.append(code or "built-in")
    # The results lead (loss, then the speed column, then what happened to the runs); the jobs' own
    # times follow as the record they are, not as the first numbers a reader compares.
    order = [0, 1, headers.index(METRIC_LABELS["test_loss"]), headers.index(f"test loss vs {REFERENCE_VARIANT}"), sequential, headers.index("notes")]
    order += [i for i in range(len(headers)) if i not in order]
    # Against a reference that is not a variant here (a sweep without torch_layernorm, or whose every
    # variant also varies another axis), the column would be dashes under a name nobody ran.
    loss_column = headers.index(f"test loss vs {REFERENCE_VARIANT}")
    if rows and all(row[loss_column] == DASH for row in rows):
        order.remove(loss_column)
    return [headers[i] for i in order], [[row[i] for i in order] for row in rows]
