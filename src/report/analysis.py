"""A sweep's report as data: the runs read from MLflow, the table, the paired comparisons, the speed
check, the learning-rate stability, the published study's claims set against them (src.report.judge.study).
Data only: src.report.words writes its sentences (the pairs' section: src.report.words.pairs).

`analyze` reads it; src.report.render walks its sections once (render.sections) into the terminal
text, report.md, the verdict and report.html, and src.report.files writes the files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from src.core import paths
from src.report.judge.pairs import (
    Margins,
    Result,
    Unmatched,
    compare,
    compare_family,
    comparison_pairs,
    reference_pairs,
    unmatched_pairs,
)
from src.report.judge.sequential import SequentialVerdict, load_verdicts
from src.report.judge.speed import SpeedVerdict, check_reference, compare_speed, timed_variants
from src.report.judge.stability import by_learning_rate, initial_losses, is_lr_sweep, lr_sensitivity
from src.report.judge.study import StudySection, against_study
from src.report.read.provenance import code_sentence, mark_rows, reference_code
from src.report.read.runs import (
    ReportError,
    SpeedCheck,
    load_curves,
    load_speed_check,
    load_sweep,
    open_store,
)
from src.report.read.settings import ReportSettings
from src.report.read.table import summarize
from src.stats.inference import Interval
from src.tracking.store import Store
from src.tracking.sweep import STALE_AFTER_S
from src.tracking.tags import RESULT_OUTCOMES, RUNNING
from src.tracking.variants import Axis

__all__ = ["Analysis", "ReportError", "analyze"]


@dataclass
class Analysis:
    experiment: str
    tracking_uri: str
    experiment_id: str
    runs: pd.DataFrame  # one row per training run
    curves: pd.DataFrame  # step metrics, long format
    table: pd.DataFrame  # one row per variant
    comparisons: list[Result]  # per pair and metric (see src.report.judge.pairs)
    margins: Margins
    superseded: int = 0  # the other runs of a config (fingerprint) run more than once: its latest result counts
    unmatched: list[Unmatched] = field(default_factory=list)  # requested pairs that could not be compared
    speed_verdicts: list[SpeedVerdict] = field(default_factory=list)  # the speed check's verdicts (src.report.judge.speed)
    speed: SpeedCheck = field(default_factory=lambda: SpeedCheck({}, {}, {}))  # the latest speed check (empty: none)
    stability: pd.DataFrame | None = None  # per (variant, lr), when the sweep varied the learning rate
    sensitivity: pd.DataFrame | None = None  # per variant, Wortsman et al.'s LR sensitivity (same condition)
    axes: tuple[Axis, ...] = ()  # what the runs vary, seed aside (src.tracking.variants)
    files: list[Path] = field(default_factory=list)
    report_run_id: str | None = None  # the MLflow run holding the files
    store: Store | None = field(default=None, repr=False)  # where it was read, opened once
    code_note: str = ""  # the runs come from more than one code (src.report.read.provenance)
    sequential: list[SequentialVerdict] = field(default_factory=list)  # a sequential sweep's verdicts
    study: StudySection = field(default_factory=StudySection)  # the first claims file's section (the study's by default), judged
    more_claims: list[StudySection] = field(default_factory=list)  # the other chosen claims files' (report.claims), each its own
    # Each variant against the report's one loss reference (the table's `test loss vs` column's), a Holm
    # family of its own, and each timed variant against the speed check's reference: what every job's
    # run carries in MLflow's columns (src.report.words.columns), one reference per column.
    reference_comparisons: list[Result] = field(default_factory=list)
    reference_speed: list[SpeedVerdict] = field(default_factory=list)

    @property
    def claim_sections(self) -> list[StudySection]:
        """Every chosen claims file's section, in report.claims' order (src.report.words.study writes each)."""
        return [self.study, *self.more_claims]

    def speed_estimates(self) -> tuple[str, dict[str, tuple[float, float, float]]] | None:
        """The speed check's reference and, per variant it timed, the step-time change against it
        (relative; the estimate its verdict against the reference read, `reference_speed`, with its 95%
        interval); the reference's own is 0. None without a check of the norms' kernels."""
        reference = check_reference(self.speed.check)
        if reference is None:
            return None
        return reference, {reference: (0.0, 0.0, 0.0), **{v.b: relative(v.predicted) for v in self.reference_speed}}


def relative(i: Interval) -> tuple[float, float, float]:
    """A log-ratio estimate and its interval's ends as the relative changes they are (step time, b's against a's)."""
    return math.expm1(i.diff), math.expm1(i.low), math.expm1(i.high)


def analyze(
    experiment: str,
    tracking_uri: str | None = None,
    chosen: ReportSettings | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> Analysis:
    """Read the experiment from MLflow and compute the table and the comparisons, as the `report`
    group chooses (src.report.read.settings.report_settings; none given: its defaults);
    `stale_after_s` (`sweep.stale_after_s`) how long a silent RUNNING run counts as running."""
    uri = tracking_uri or paths.tracking_uri()
    store = open_store(uri)
    sweep = load_sweep(experiment, store, stale_after_s)
    runs = sweep.runs
    if not runs.outcome.isin(RESULT_OUTCOMES).any():  # a divergence is a result: reported, as a finished run is
        counts = ", ".join(f"{n} {o}" for o, n in runs.outcome.value_counts().items()) or "no training runs"
        # "yet" only where waiting can bring one: a run still training.
        yet = " yet" if (runs.outcome == RUNNING).any() else ""
        raise ReportError(f"MLflow experiment {experiment!r} has no runs with a result{yet} ({counts})")
    curves = load_curves(store, runs)
    code = reference_code(store, sweep.experiment_id, runs)
    found = assemble(
        runs, sweep.axes, load_speed_check(store, sweep.experiment_id), chosen or ReportSettings(),
        load_verdicts(store, sweep.experiment_id), curves, experiment, uri, sweep.experiment_id,
    )  # fmt: skip
    found.table = mark_rows(found.table, runs, code)
    found.superseded, found.store, found.code_note = sweep.superseded, store, code_sentence(runs, code)
    return found


def assemble(
    runs: pd.DataFrame,
    axes: tuple[Axis, ...],
    speed: SpeedCheck,
    chosen: ReportSettings,
    sequential: list[SequentialVerdict] | None = None,
    curves: pd.DataFrame | None = None,
    experiment: str = "",
    tracking_uri: str = "",
    experiment_id: str = "",
) -> Analysis:
    """Every judgement of a sweep from what was read of it (the runs, their axes, the latest speed check, a
    sequential sweep's decisions), as the report's settings choose: the one path from numbers to the report's
    data, whether they came from MLflow (`analyze`) or not (the property tests' generated sweeps)."""
    curves = curves if curves is not None else pd.DataFrame()
    sequential = sequential or []
    lr_swept = is_lr_sweep(runs)
    # The speed check (empty without one) times the report's pairs whose variants it ran with the
    # norms' kernels, and each other variant it ran against its reference.
    check, margins, pairs, reference = speed.check, chosen.margins, chosen.pairs, chosen.reference
    timed, reference_ = timed_variants(check), check_reference(check)
    timed_pairs = [(a, b) for a, b, _ in comparison_pairs(runs, pairs, reference) if a in timed and b in timed]
    against = [(reference_, v) for v in timed if v != reference_] if reference_ else []
    sections = [against_study(runs, axes, check, margins, sequential, f) for f in chosen.claims or [None]]
    return Analysis(
        experiment=experiment,
        tracking_uri=tracking_uri,
        experiment_id=experiment_id,
        runs=runs,
        curves=curves,
        table=summarize(runs),
        comparisons=compare(runs, margins, pairs, reference),
        margins=margins,
        unmatched=unmatched_pairs(runs, pairs) if pairs is not None else [],
        speed_verdicts=compare_speed(check, timed_pairs, margins.speed),
        speed=speed,
        stability=by_learning_rate(runs) if lr_swept else None,
        sensitivity=lr_sensitivity(runs, initial_losses(curves)) if lr_swept else None,
        axes=axes,
        sequential=sequential,
        study=sections[0],
        more_claims=sections[1:],
        reference_comparisons=compare_family(runs, reference_pairs(runs), margins),
        reference_speed=compare_speed(check, against, margins.speed),
    )

