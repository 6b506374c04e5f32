"""This sweep's setting and table beside the published study's: device and count, model size, tokens
trained, precision and seeds, so a reader sees at a glance how far a comparison with the study
carries; the runs no claim read, set aside; and per study variant its row next to this sweep's (`study_table`).

Read from the runs frame (src.report.read.runs.setting_of puts each run's setting in its row); a value
that differs between the runs is listed with each of its values. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from src.report.judge.speed import pair_estimate
from src.report.judge.study import SetAside, StudySection
from src.report.judge.study_match import study_code
from src.report.read.claims import SPEED, Published, table_effect
from src.report.read.table import most_seeds
from src.report.words.common import counted
from src.report.words.jobs import timing_caveat
from src.report.words.speed import step_time_text
from src.report.words.table import DASH, mean_cell
from src.tracking.identity import INIT_KEY, INIT_RECORDED_BEFORE
from src.tracking.tags import FINISHED


def _values(column: pd.Series) -> str:
    """The distinct values of a column, in the runs' order, joined ("?" when none)."""
    seen = [str(v) for v in dict.fromkeys(column.dropna()) if str(v)]
    return " / ".join(seen) or "?"


def device_text(runs: pd.DataFrame) -> str:
    """`1× Intel(R) Xeon(R) ... (cpu)`: devices per run, the device's name and its type."""
    return _values(pd.Series([f"{'?' if math.isnan(d) else int(d)}× {name or '?'} ({kind})"
                              for d, name, kind in zip(runs.devices, runs.device_name, runs.device_type, strict=True)]))  # fmt: skip


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
    for key in study:
        column = runs[key] if key in runs else pd.Series(dtype=object)
        ours[key] = _values(column.replace("", INIT_RECORDED_BEFORE) if key == INIT_KEY else column)
    differs = [k for k in study if ours[k] != str(study[k])]
    sweep = ", ".join(f"{k}={v}" for k, v in ours.items())
    theirs = ", ".join(f"{k}={v}" for k, v in study.items())
    return f"code: {who} {sweep}; {noun} {theirs}" + (f" (differs: {', '.join(differs)})" if differs else "")


def setting_lines(runs: pd.DataFrame, judged: StudySection) -> list[str]:
    """One line per fact of the setting its file states, `device: this sweep ...; the study ...` (the runs the claims
    read: "the runs read" where some were set aside; the source named by its file's `source_noun`), then its code
    (`setting.code`) where it names any, then the runs set aside. A quantity the runs differ in (two model sizes in
    one experiment) is given as its range; tokens per parameter is each run's own."""
    s, noun = judged.file.setting, judged.file.source_noun
    aside = set_aside_lines(judged.set_aside, judged.read, noun)
    if s is None:
        return aside
    runs = runs[~runs.variant.isin({a.variant for a in judged.set_aside})]
    who = "the runs read" if judged.set_aside else "this sweep"
    n_params = f"{_span(runs.n_params, '{:,.0f}')} parameters"
    per_param = _span(runs.tokens / runs.n_params, "{:.3g}")
    sweep_tokens = _span(runs.tokens, "{:,.0f}") + (f" ({per_param} per parameter)" if per_param != "?" else "")
    code = code_line(runs, study_code(judged.file), who, noun)
    return [
        f"device: {who} {device_text(runs)}; {noun} {s.devices}× {s.device} ({'cuda' if s.cuda else 'cpu'})",
        f"model: {who} {_values(runs.model)}, {n_params}; {noun} {s.model}, {s.n_params:,} parameters",
        f"tokens trained per run: {who} {sweep_tokens}; {noun} {s.tokens:,} ({s.tokens / s.n_params:.3g} per parameter)",
        f"precision: {who} {_values(runs.precision)}; {noun} {s.precision}",
        f"seeds per variant: {who} {seeds_per_variant(runs)}; {noun} {s.seeds}",
        *([code] if code else []),
        *not_the_study_lines(runs, noun),
        *aside,
    ]


def differs_text(key: str, got: str, wanted: str | None, noun: str) -> str:
    """`model.init=gpt2 (the study model.init=study)`: a run's value beside its source's."""
    return f"{key}={got} ({noun} {'has no ' + key if wanted is None else f'{key}={wanted}'})"


def set_aside_lines(set_aside: Sequence[SetAside], read: Sequence[str], noun: str) -> list[str]:
    """`set aside, read by no claim: X, Y (6 runs): model.init=gpt2 (the study model.init=study). The lines
    above are the runs the claims read: ...` ([] when every run of its file's norms was read)."""
    if not set_aside:
        return []
    why_of = [tuple(m[1:] for m in s.why) for s in set_aside]  # the variants set aside for the same reasons, said together
    said = []
    for why in dict.fromkeys(why_of):
        these = [s for s, w in zip(set_aside, why_of, strict=True) if w == why]
        differs = " and ".join(differs_text(key, got, wanted, noun) for key, got, wanted in why)
        said.append(f"{', '.join(s.variant for s in these)} ({counted(sum(s.runs for s in these), 'run')}){': ' + differs if differs else ''}")
    return [f"set aside, read by no claim: {'; '.join(said)}. The lines above are the runs the claims read: {', '.join(read)}"]


def not_the_study_lines(runs: pd.DataFrame, noun: str = "the study") -> list[str]:
    """Norms of the user's (`_target_`) the sweep ran: none is a variant of the source (`noun`), none has a claim's word."""
    if "norm_target" not in runs:
        return []
    own = dict(zip(runs.norm, runs.norm_target, strict=True))
    named = [f"{norm} ({target})" for norm, target in own.items() if target]
    return [f"not {noun}'s variants (no claim reads them): {', '.join(named)}"] if named else []


# With a speed check, the sweep's speed beside the study's is its one estimate per pair (against the
# hand-rolled LayerNorm, as the study's claims time the built-ins), not the jobs' own times.
TIME_REFERENCE = "hand_layernorm"


def study_table(table: pd.DataFrame, judged: StudySection, check: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per study variant, the study's row and this sweep's (mean ± 95% CI over finished seeds): the sweep's
    variant that is the study's (`judged.labels`), else each variant of that norm it ran (another model size,
    placement, ...), so the table is never a header alone. The sweep's speed is, with a speed check of the
    norms' kernels, its estimate against the hand-rolled LayerNorm; else its jobs' times and tokens/s, headed
    with how the jobs were timed where they are not a measurement (jobs on a CPU)."""
    source, reference = judged.file, judged.labels.get(TIME_REFERENCE)
    whose = source.source_noun.removeprefix("the ")  # the columns name whose figures they hold
    caveat = timing_caveat(judged.timing, short=True)
    jobs = f"sweep; {caveat}" if caveat else "sweep"
    seeds = source.setting.seeds if source.setting else 1

    def theirs(x: float, fmt: str) -> str:
        return DASH if math.isnan(x) else fmt.format(x)

    def step_time(variant: str) -> str:  # against the reference, as the speed check's verdict has it
        found = pair_estimate(check, reference, variant) if reference and variant != reference else None
        return "ref" if variant == reference else step_time_text(found) if found is not None else DASH

    # header -> its cell of (a norm of the source, its row there, the sweep's variant, its row in the report's table)
    cells: dict[str, Callable[[str, Published, str, Any], str]] = {
        "variant": lambda norm, s, v, r: norm if v == norm else f"{norm} ({v})",
        f"seeds ({whose} / sweep)": lambda norm, s, v, r: f"{seeds} / {int(r.finished)}",
        f"training time s ({whose})": lambda norm, s, v, r: theirs(s.train_time_s, "{:,.0f}"),
    }
    if check.get("kernel"):
        cells[f"training time vs {TIME_REFERENCE} ({whose})"] = lambda norm, s, v, r: (
            "ref" if norm == TIME_REFERENCE else theirs(table_effect(source.table, SPEED, TIME_REFERENCE, norm), "{:+.1%}"))
        cells[f"step time vs {TIME_REFERENCE} (sweep, speed check)"] = lambda norm, s, v, r: step_time(v)
    else:
        cells[f"training time s ({jobs})"] = lambda norm, s, v, r: mean_cell(r, "train_time_s")
        cells[f"tokens/s ({whose})"] = lambda norm, s, v, r: theirs(s.tokens_per_sec, "{:,.0f}")
        cells[f"tokens/s ({jobs})"] = lambda norm, s, v, r: mean_cell(r, "tokens_per_sec")
    cells[f"test loss ({whose})"] = lambda norm, s, v, r: (
        f"NaN by step {s.nan_from_step}" if s.nan_from_step is not None else theirs(s.test_loss, "{:.4f}"))
    cells["test loss (sweep)"] = lambda norm, s, v, r: str(r.notes) if r.finished == 0 and r.notes else mean_cell(r, "test_loss")
    by_variant = table.set_index("variant") if len(table) else table
    norm_of = by_variant["norm"].to_dict() if "norm" in by_variant else {}
    rows = []
    for norm, study in source.table.items():
        label = judged.labels.get(norm)
        shown = [label] if label is not None else [v for v in by_variant.index if norm_of.get(v) == norm]
        rows += [[cell(norm, study, str(v), by_variant.loc[v]) for cell in cells.values()] for v in shown if v in by_variant.index]
    return list(cells), rows
