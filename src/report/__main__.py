"""`python -m src.report`: print the sweep report and write it to reports/<experiment>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from src.report import ReportError, default_out_dir, generate_report
from src.report.runs import default_tracking_uri


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.report", description=__doc__)
    parser.add_argument("--experiment", default="normsweep", help="MLflow experiment (default: %(default)s)")
    parser.add_argument("--tracking-uri", default=None, help=f"MLflow tracking URI (default: {default_tracking_uri()})")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: reports/<experiment>/)")
    parser.add_argument("--no-summary-run", action="store_true", help="do not log the files to MLflow")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        analysis = generate_report(args.experiment, args.tracking_uri, args.out, log_summary=not args.no_summary_run)
    except ReportError as err:
        print(f"report: {err}", file=sys.stderr)
        return 1
    print(analysis.text())
    print(f"\nwritten to {(args.out or default_out_dir(args.experiment))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
