"""This sweep's setting and table beside the published study's: device and count, model size, tokens
trained, precision and seeds, so a reader sees at a glance how far a comparison with the study
carries; and per study variant its row next to this sweep's (`study_table`).

Read from the runs frame (src.report.read.runs.setting_of puts each run's setting in its row); a value
that differs between the runs is listed with each of its values. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pandas as pd

from src.report.read.claims import SPEED, ClaimsFile, Setting, table_effect
from src.report.read.table import most_seeds
from src.report.words.table import DASH, mean_cell
from src.tracking.identity import INIT_KEY, INIT_RECORDED_BEFORE
from src.tracking.tags import FINISHED


def _values(column: pd.Series) -> str:
    """The distinct values of a column, in the runs' order, joined ("?" when none)."""
    seen = [str(v) for v in dict.fromkeys(column.dropna()) if str(v)]
    return " / ".join(seen) or "?"


def device_text(runs: pd.DataFrame) -> str:
    """`1× Intel(R) Xeon(R) ... (cpu)`: devices per run, the device's name and its type."""
    per_run = [
        f"{'?' if math.isnan(d) else int(d)}× {name or '?'} ({kind})"
        for d, name, kind in zip(runs.devices, runs.device_name, runs.device_type, strict=True)
    ]
    return _values(pd.Series(per_run))


def seeds_per_variant(runs: pd.DataFrame) -> int:
    """The most finished seeds any variant has (the study: one)."""
    return most_seeds(runs[runs.outcome == FINISHED])


def _span(values: pd.Series, fmt: str) -> str:
    """`fmt` of the one value, or `min–max` where the runs differ ("?" when none is known)."""
    known = values.dropna()
    if not len(known):
        return "?"
    low, high = fmt.format(known.min()), fmt.format(known.max())
    return high if low == high else f"{low}–{high}"


def code_line(runs: pd.DataFrame, study: Mapping[str, str | None], who: str = "this sweep", noun: str = "the study") -> str:
    """`code: this sweep model.init=gpt2, ...; the study model.init=study, ... (differs: model.init)`:
    the settings of the source's training code a config can change (its `setting.code`), the source's
    (`noun`'s) as its preset (`study`) has them; "" for a file that names none. A run recorded before
    `model.init` existed started from its one init."""
    if not study:
        return ""
    ours = {}
    keys = tuple(study)
    for key in keys:
        column = runs[key] if key in runs else pd.Series(dtype=object)
        if key == INIT_KEY:
            column = column.replace("", INIT_RECORDED_BEFORE)
        ours[key] = _values(column)
    differs = [k for k in keys if ours[k] != str(study.get(k))]
    sweep = ", ".join(f"{k}={v}" for k, v in ours.items())
    theirs = ", ".join(f"{k}={study.get(k)}" for k in keys)
    return f"code: {who} {sweep}; {noun} {theirs}" + (f" (differs: {', '.join(differs)})" if differs else "")


def setting_lines(runs: pd.DataFrame, study_code: Mapping[str, str | None], who: str, s: Setting, noun: str = "the study") -> list[str]:
    """One line per fact: `device: this sweep ...; the study ...` (`who`: whose runs these are, "the
    runs read" where some were set aside; `noun`: who stated the setting, its file's `source_noun`),
    the last its code (`study_code`: a `setting.code` key -> the source's value), where it names any. A quantity the runs differ in (two model sizes in one experiment) is given as
    its range; tokens per parameter is each run's own."""
    n_params = f"{_span(runs.n_params, '{:,.0f}')} parameters"
    per_param = _span(runs.tokens / runs.n_params, "{:.3g}")
    sweep_tokens = _span(runs.tokens, "{:,.0f}") + (f" ({per_param} per parameter)" if per_param != "?" else "")
    code = code_line(runs, study_code, who, noun)
    return [
        f"device: {who} {device_text(runs)}; {noun} {s.devices}× {s.device} ({'cuda' if s.cuda else 'cpu'})",
        f"model: {who} {_values(runs.model)}, {n_params}; {noun} {s.model}, {s.n_params:,} parameters",
        f"tokens trained per run: {who} {sweep_tokens}; {noun} {s.tokens:,} ({s.tokens / s.n_params:.3g} per parameter)",
        f"precision: {who} {_values(runs.precision)}; {noun} {s.precision}",
        f"seeds per variant: {who} {seeds_per_variant(runs)}; {noun} {s.seeds}",
        *([code] if code else []),
        *not_the_study_lines(runs, noun),
    ]


def not_the_study_lines(runs: pd.DataFrame, noun: str = "the study") -> list[str]:
    """Norms of the user's (`_target_`) the sweep ran: none is a variant of the source (`noun`), none has a claim's word."""
    if "norm_target" not in runs:
        return []
    own = dict(zip(runs.norm, runs.norm_target, strict=True))
    named = [f"{norm} ({target})" for norm, target in own.items() if target]
    return [f"not {noun}'s variants (no claim reads them): {', '.join(named)}"] if named else []


TABLE_COLUMNS = ["variant", "seeds (study / sweep)", "training time s (study)", "training time s (sweep)",
                 "tokens/s (study)", "tokens/s (sweep)", "test loss (study)", "test loss (sweep)"]  # fmt: skip


# With a speed check, the sweep's speed beside the study's is its one estimate per pair (against the
# hand-rolled LayerNorm, as the study's claims time the built-ins), not the jobs' own times.
TIME_REFERENCE = "hand_layernorm"
RELATIVE_COLUMNS = ["variant", "seeds (study / sweep)", "training time s (study)", f"training time vs {TIME_REFERENCE} (study)",
                    f"step time vs {TIME_REFERENCE} (sweep, speed check)", "test loss (study)", "test loss (sweep)"]  # fmt: skip


def study_table(
    table: pd.DataFrame,
    labels: Mapping[str, str | None],
    estimate: Callable[[str, str], str | None] | None,
    caveat: str,
    source: ClaimsFile,
) -> tuple[list[str], list[list[str]]]:
    """The study's row and this sweep's (mean ± 95% CI over finished seeds, the report's table) per
    study variant: the sweep's variant that is the study's (`labels`), or where none is (another model
    size, placement, ...) each variant of that norm the sweep ran (the table's `norm`), named as the
    report names it, so the table is never a header alone. With `estimate` (variants a, b -> b's speed
    estimate against a from the speed check, as text) the sweep's speed is that, relative to the
    hand-rolled LayerNorm, in place of its jobs' times and tokens/s; else those, headed with `caveat`
    where they are not a measurement (jobs on a CPU)."""
    rows = []
    by_variant = table.set_index("variant") if len(table) else table
    norm_of = by_variant["norm"].to_dict() if "norm" in by_variant else {}
    reference = labels.get(TIME_REFERENCE)
    for norm in source.table:
        label = labels.get(norm)
        shown = [label] if label is not None else [v for v in by_variant.index if norm_of.get(v) == norm]
        for variant in shown:
            if variant not in by_variant.index:
                continue
            row = _study_row(source, norm, str(variant), by_variant.loc[variant])
            if estimate is not None:
                study = table_effect(source.table, SPEED, TIME_REFERENCE, norm)
                ours = "ref" if variant == reference else (estimate(reference, str(variant)) if reference else None)
                study_text = "ref" if norm == TIME_REFERENCE else DASH if math.isnan(study) else f"{study:+.1%}"
                row = [*row[:3], study_text, ours or DASH, *row[6:]]
            rows.append(row)
    # The columns name whose figures they hold: the study's, or another source's.
    whose = source.source_noun.removeprefix("the ")
    if estimate is not None:
        return [c.replace("(study", f"({whose}") for c in RELATIVE_COLUMNS], rows
    timed = ("training time s (sweep)", "tokens/s (sweep)")
    return [f"{c[:-1]}; {caveat})" if caveat and c in timed else c.replace("(study", f"({whose}") for c in TABLE_COLUMNS], rows


def _study_row(source: ClaimsFile, norm: str, label: str, r: pd.Series) -> list[str]:
    """One study variant's row: the study's figures beside those of the sweep's variant `label`."""
    study = source.table[norm]
    ours = [mean_cell(r, c) for c in ("train_time_s", "tokens_per_sec", "test_loss")]
    if r.finished == 0 and r.notes:
        ours[-1] = str(r.notes)
    theirs = [DASH if math.isnan(v) else f.format(v) for v, f in ((study.train_time_s, "{:,.0f}"), (study.tokens_per_sec, "{:,.0f}"), (study.test_loss, "{:.4f}"))]
    if study.nan_from_step is not None:
        theirs[-1] = f"NaN by step {study.nan_from_step}"
    name = norm if label == norm else f"{norm} ({label})"
    seeds = source.setting.seeds if source.setting else 1
    return [name, f"{seeds} / {int(r.finished)}", theirs[0], ours[0], theirs[1], ours[1], theirs[2], ours[2]]
