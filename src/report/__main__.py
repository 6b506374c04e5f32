"""`python -m src.report [options] [overrides]`: print the sweep report and write it to reports/<experiment>/.

While the experiment's sweep is still running, the report is printed only (read, never written into
the running sweep's run or over reports/<experiment>/); --out DIR writes that partial report to DIR.

Positional arguments are the training config's overrides (`paths.mlflow_db=/data/mlflow.db`,
`logger.tracking_uri=http://host:5000`, `report.margin.test_loss=0.02`), so the report reads the
store that training wrote to. The options below override the config's `report` group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from src import paths
from src.paths import ConfigError
from src.report import ReportError, analyze, generate_report, report_folder, terminal_text, write
from src.report.comparisons import Margins, default_margin, reference_setting, settings
from src.report.runs import open_store
from src.report.status import status_text
from src.tracking.store import StoreError
from src.tracking.sweep import running_sweep
from src.tracking.tags import HOST_TAG, PID_TAG
from src.tracking.ui_view import ui_base

if TYPE_CHECKING:
    from src.tracking.store import Run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m src.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: the config's experiment_name, or the --sweep-dir's)")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: the training config's)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: <paths.reports_dir>/<experiment>/)")
    parser.add_argument("--no-summary-run", action="store_true", help="do not log the files to MLflow")
    parser.add_argument("--status", action="store_true", help="list every job of the sweep with its state")
    parser.add_argument("--sweep-dir", type=Path, default=None, help="with --status: a multirun/<date>/<time> folder")
    parser.add_argument(
        "--margin-loss", type=float, default=None, help=f"equivalence margin of test loss, nats (report.margin.test_loss; {default_margin('test_loss')})"
    )
    parser.add_argument(
        "--margin-speed", type=float, default=None, help=f"equivalence margin of tokens/s, relative (report.margin.speed; {default_margin('speed')})"
    )
    parser.add_argument(
        "--pair", action="append", default=None, metavar="A:B", help="compare B against A (repeatable; replaces the study's pairs)"
    )
    parser.add_argument(
        "--plan", action="store_true", help="from the experiment's runs as a pilot: seeds and device-hours to decide each comparison"
    )
    parser.add_argument(
        "overrides", nargs="*", help="training config overrides, e.g. paths.mlflow_db=/x/mlflow.db (with --plan also hydra.sweeper.*)"
    )
    return parser.parse_args(argv)


def plan(
    experiment: str,
    uri: str,
    overrides: list[str],
    margins: Margins,
    pairs: list[tuple[str, str]] | None,
    reference: dict[str, str] | None = None,
) -> str:
    """Each design's forecast from the experiment's runs (src/report/plan.py); device-hours from
    the pilot's train time, or from preflight's cost model when the overrides name a cluster."""
    from src.launch.sequential import SETTINGS, check_settings
    from src.report.plan import (
        forecast,
        pilot_hours,
        plan_text,
        planned_pairs,
        sweep_overrides,
        variant_overrides,
    )
    from src.report.runs import load_sweep, open_store
    from src.stats.sequential import Design

    # The sweeper's settings as `hydra/sweeper=sequential` composes them (with any hydra.sweeper.* override).
    sweeper = paths.compose([*overrides, "hydra/sweeper=sequential"], with_hydra=True).hydra.sweeper
    settings_ = OmegaConf.to_container(sweeper, resolve=True)
    check_settings(*(settings_.get(k) for k in SETTINGS))
    design = Design(*(settings_[k] for k in ("first_seeds", "seeds_per_round", "max_seeds", "alpha", "spending", "futility")))
    sweep = load_sweep(experiment, open_store(uri))
    runs = sweep.runs
    variants = sorted({v for pair in planned_pairs(runs, pairs, reference) for v in pair})
    cluster = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == "cluster"]
    # Priced at another scale: the job's overrides (not where the pilot is stored, not the sweeper's).
    elsewhere = [o for o in overrides if not o.startswith(("hydra.sweeper.", "paths.", "logger."))] if cluster else []
    if cluster:
        made_by = variant_overrides(runs, sweep.axes)
        hours, source = preflight_hours(overrides, {v: made_by[v] for v in variants}), f"preflight's cost model, {' '.join(elsewhere)}"
    else:
        hours, source = pilot_hours(runs, variants), "the pilot's recorded train time x devices"
    plan_ = forecast(runs, margins, design, hours, pairs, reference=reference, hours_source=source)
    return plan_text(experiment, plan_, margins, elsewhere, sweep_overrides(runs, sweep.axes))


def preflight_hours(overrides: list[str], variants: dict[str, list[str]]) -> dict[str, float]:
    """Device-hours of one seed of each variant (name -> the overrides that make it) under
    `overrides`, by preflight's estimate."""
    from src.preflight.job import CheckpointLedger, inspect_job

    out = {}
    for v, own in variants.items():
        job = inspect_job([*overrides, *own], CheckpointLedger())
        hours = job.time.device_hours if job.time is not None else None
        if hours is None:
            why = "; ".join(job.failures) or "no peak FLOP/s for this device and precision (preflight.peak_tflops)"
            raise ReportError(f"preflight cannot estimate the time of a {v} job: {why}")
        out[v] = hours
    return out


def running_sweep_of(experiment: str, uri: str, stale_after_s: float) -> Run | None:
    """The experiment's sweep run that a live process is still running (None: no such experiment)."""
    store = open_store(uri)
    found = store.find_experiment(experiment)
    return running_sweep(store, found.experiment_id, stale_after_s) if found is not None else None


def partial_report(
    experiment: str,
    uri: str,
    sweep: Run,
    out: Path | None,
    margins: Margins,
    pairs: list[tuple[str, str]] | None,
    reference: dict[str, str] | None = None,
) -> int:
    """A report taken while the sweep runs: read only. It is printed (and written only to an explicit
    --out); the sweep's run and reports/<experiment>/ get the full report when the sweep ends."""
    analysis = analyze(experiment, uri, margins, pairs, reference=reference)
    print(terminal_text(analysis))
    if out is not None:
        write(analysis, out)
        print(f"\nwritten to {out}")
    tags = sweep.data.tags
    where = f"pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}"
    print(
        f"\nnote: sweep run {sweep.info.run_id} of {experiment!r} is still running ({where}): this report is partial "
        f"({len(analysis.runs)} runs so far); nothing was written to the sweep run or to the reports folder, which get "
        "the full report when the sweep ends (--out DIR saves this one)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        # --plan also takes the sweeper's settings (hydra.sweeper.*), which only the sweeper's config has.
        sweeper = [o for o in args.overrides if o.startswith("hydra.sweeper.")] if args.plan else []
        overrides = [o for o in args.overrides if o not in sweeper]
        cfg = paths.compose(overrides)  # the store, experiment and folders that training would use
        pairs = [p.split(":") for p in args.pair] if args.pair else None
        report_cfg = OmegaConf.to_container(cfg.get("report") or {}, resolve=True)
        margins, chosen = settings(report_cfg, args.margin_loss, args.margin_speed, pairs)
        reference = reference_setting(report_cfg)
    except Exception as err:  # a malformed override (Hydra names it), a bad margin or pair
        print(f"report: {err}", file=sys.stderr)
        return 2
    uri = args.tracking_uri or str(cfg.logger.tracking_uri)
    from_sweep_dir = args.sweep_dir is not None and args.experiment is None
    experiment = args.experiment or str(cfg.experiment_name)
    try:
        if args.plan:
            try:
                print(plan(experiment, uri, [*overrides, *sweeper], margins, chosen, reference))
            except ConfigError as err:  # a bad hydra.sweeper.* setting: one line naming it
                print(f"report: config error: {err}", file=sys.stderr)
                return 2
            return 0
        if args.status or args.sweep_dir:
            print(status_text(None if from_sweep_dir else experiment, uri, args.sweep_dir, float(cfg.sweep.stale_after_s)))
            return 0
        out = args.out or report_folder(cfg.paths.reports_dir, experiment)
        running = running_sweep_of(experiment, uri, float(cfg.sweep.stale_after_s))
        if running is not None:
            return partial_report(experiment, uri, running, args.out, margins, chosen, reference)
        analysis = generate_report(
            experiment, uri, out, log_summary=not args.no_summary_run, margins=margins, pairs=chosen, reference=reference
        )
    except (ReportError, StoreError, ConfigError) as err:  # no such store or experiment; unreadable; a reference no run has
        print(f"report: {err}", file=sys.stderr)
        return 1
    print(terminal_text(analysis))
    print(f"\nwritten to {out}")
    print("in the MLflow UI (python -m src.ui):", *analysis.ui_links(ui_base(cfg.logger)), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
