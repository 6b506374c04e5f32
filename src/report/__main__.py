"""`python -m src.report [options] [overrides]`: print the sweep report and write it to reports/<experiment>/.

Positional arguments are the training config's overrides (`paths.mlflow_db=/data/mlflow.db`,
`logger.tracking_uri=http://host:5000`, `report.margin.test_loss=0.02`), so the report reads the
store that training wrote to. The options below override the config's `report` group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

from src import paths
from src.report import ReportError, generate_report
from src.report.comparisons import Margins, default_margin, settings
from src.report.status import status_text
from src.tracking.store import StoreError
from src.tracking.ui_view import ui_base


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


def plan(experiment: str, uri: str, overrides: list[str], margins: Margins, pairs: list[tuple[str, str]] | None) -> str:
    """The sequential sweep's forecast from the experiment's runs (src/report/plan.py)."""
    from src.report.plan import forecast, plan_text
    from src.report.runs import load_sweep, open_store

    # The sweeper's settings as `hydra/sweeper=sequential` composes them (with any hydra.sweeper.* override).
    design = paths.compose([*overrides, "hydra/sweeper=sequential"], with_hydra=True).hydra.sweeper
    settings_ = {k: design[k] for k in ("first_seeds", "seeds_per_round", "alpha")}
    runs = load_sweep(experiment, open_store(uri)).runs
    return plan_text(experiment, forecast(runs, margins, **settings_, pairs=pairs), margins, settings_)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        # --plan also takes the sweeper's settings (hydra.sweeper.*), which only the sweeper's config has.
        sweeper = [o for o in args.overrides if o.startswith("hydra.sweeper.")] if args.plan else []
        overrides = [o for o in args.overrides if o not in sweeper]
        cfg = paths.compose(overrides)  # the store, experiment and folders that training would use
        pairs = [p.split(":") for p in args.pair] if args.pair else None
        margins, chosen = settings(
            OmegaConf.to_container(cfg.get("report") or {}, resolve=True), args.margin_loss, args.margin_speed, pairs
        )
    except Exception as err:  # a malformed override (Hydra names it), a bad margin or pair
        print(f"report: {err}", file=sys.stderr)
        return 2
    uri = args.tracking_uri or str(cfg.logger.tracking_uri)
    from_sweep_dir = args.sweep_dir is not None and args.experiment is None
    experiment = args.experiment or str(cfg.experiment_name)
    try:
        if args.plan:
            print(plan(experiment, uri, [*overrides, *sweeper], margins, chosen))
            return 0
        if args.status or args.sweep_dir:
            print(status_text(None if from_sweep_dir else experiment, uri, args.sweep_dir, float(cfg.sweep.stale_after_s)))
            return 0
        out = args.out or Path(cfg.paths.reports_dir) / experiment
        analysis = generate_report(experiment, uri, out, log_summary=not args.no_summary_run, margins=margins, pairs=chosen)
    except (ReportError, StoreError) as err:  # no such store or experiment; a store that cannot be read
        print(f"report: {err}", file=sys.stderr)
        return 1
    print(analysis.text())
    print(f"\nwritten to {out}")
    print("in the MLflow UI (python -m src.ui):", *analysis.ui_links(ui_base(cfg.logger)), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
