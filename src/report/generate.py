"""The whole report of one experiment: analysed, written to files and attached to the sweep's run.

`generate_report` is what `python -m src.report` and the sweep-end report hook run on what
`src.report.analysis.analyze` read (a notebook that only reads uses `analyze` alone). Kept out of `src/report/__init__.py`, which runs before
any module of the package: a light reader (the claims format, the report's settings) would otherwise
import pandas, scipy, matplotlib and MLflow with it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from src.core import paths
from src.report.analysis import Analysis, relative
from src.report.figures.style import NOT_A_VARIANT, variant_hex
from src.report.files import claim_tags, report_folder, write
from src.report.read.runs import open_store, save_summary_run, tag_variants
from src.report.render.markdown import verdict
from src.report.render.sections import table_rows
from src.report.words.columns import job_columns
from src.report.words.pairs import comparisons_frame
from src.tracking.intervals import log_job_intervals
from src.tracking.summary import log_job_columns, log_job_speed, log_sweep_summary, pair_speed_metrics
from src.tracking.tags import BENCH_TAG, BENCH_VARIANTS, RUN_COLOR_TAG
from src.tracking.ui_view import publish_view


def generate_report(analysis: Analysis, out_dir: Path | None = None, log_summary: bool = True) -> Analysis:
    """The analysed sweep (`analyze`) written to files, and (optionally) logged to the sweep's parent
    run, each run tagged with its variant as the report found it (the MLflow UI groups runs by that tag)."""
    analysis.files = write(analysis, out_dir or report_folder(paths.compose().paths.reports_dir, analysis.experiment))
    if not log_summary:
        return analysis
    store = analysis.store or open_store(analysis.tracking_uri)
    tag_variants(store, analysis.runs, analysis.axes)
    analysis.report_run_id = save_summary_run(store, analysis.experiment_id, analysis.files)
    jobs = list(zip(analysis.runs.run_id, analysis.runs.variant, strict=True))  # (run id, variant) of each job
    headers, rows = table_rows(analysis)
    pairs = pair_speed_metrics((v.a, v.b, *relative(v.predicted)) for v in analysis.speed_verdicts)
    log_sweep_summary(store, analysis.report_run_id, analysis.table.to_dict("records"), pd.DataFrame(rows, columns=headers),
                      comparisons_frame(analysis), verdict(analysis), pairs)  # fmt: skip
    for section in analysis.claim_sections:  # one per claim of each file: its word
        store.set_tags(analysis.report_run_id, claim_tags(section))
    if speed := analysis.speed_estimates():  # each job's run carries its variant's estimate: a column, one chart of all variants
        reference, estimates = speed
        log_job_speed(store, jobs, estimates, reference)
    # Each job's run: its words against the report's references, with their intervals, as columns to sort and filter on.
    # Each job in its variant's colour in the UI (the figures' colour); the sweep run and its checks in grey.
    found, colors = job_columns(analysis), variant_hex(list(analysis.table.variant))
    columns = {v: ({**found[v].tags, RUN_COLOR_TAG: c}, found[v].metrics) if v in found else ({RUN_COLOR_TAG: c}, {})
               for v, c in colors.items()}  # fmt: skip
    log_job_columns(store, jobs, columns)
    places = {v: i for i, v in enumerate(analysis.table.variant, start=1)}  # the table's order along the step axis
    log_job_intervals(store, analysis.experiment_id, jobs,
                      {v: c.intervals for v, c in found.items() if c.intervals and v in places}, places)  # fmt: skip
    checks = [r.info.run_id for r in store.runs_tagged(analysis.experiment_id, BENCH_TAG, BENCH_VARIANTS)]
    for run_id in [analysis.report_run_id, *checks]:
        store.set_tags(run_id, {RUN_COLOR_TAG: NOT_A_VARIANT})
    publish_view(store, analysis.experiment_id)  # the start view now knows the speed check's run (no curves: not charted)
    return analysis
