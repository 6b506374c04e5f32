"""`python -m src.report [options] [key=value ...]`: print the sweep report and write it to
reports/<experiment name>/.

The report reads the MLflow experiment that training with the same overrides wrote to: the config's
`experiment_name` (set by an `experiment=` preset, or `experiment_name=...`), or --experiment-name.
While that experiment's sweep is still running, the report is printed only (read, never written into
the running sweep's run or over its reports folder); --out DIR writes that partial report to DIR.

The `key=value` arguments are the training config's overrides (`paths.mlflow_db=/data/mlflow.db`,
`logger.tracking_uri=http://host:5000`, `report.margin.test_loss=0.02`); the options below override
the config's `report` group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from src.core import cli, paths
from src.core.terminal import fit
from src.report.analysis import Analysis, analyze
from src.report.commands.status import status_text
from src.report.files import report_folder, write
from src.report.generate import generate_report
from src.report.read.runs import ReportError, open_store
from src.report.read.settings import default_margin, report_settings
from src.report.render.terminal import links_text, terminal_text, ui_links
from src.tracking.server_client import ServerLost, TeamServerDown
from src.tracking.store_uri import StoreError, redact_uri
from src.tracking.sweep import JOBS_FILE, running_sweep
from src.tracking.tags import HOST_TAG, PID_TAG
from src.tracking.ui_view import ui_base

if TYPE_CHECKING:
    from src.tracking.store import Run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    made = cli.parser("python -m src.report", __doc__, cli.OVERRIDES_HELP + "; with --plan also hydra.sweeper.*")
    made.add_argument(
        "--experiment-name", default=None, metavar="NAME",
        help="the MLflow experiment to report (default: the config's experiment_name, or the --sweep-dir's)",
    )  # fmt: skip
    made.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: the training config's)")
    made.add_argument("--out", type=Path, default=None, help="output folder (default: <paths.reports_dir>/<experiment name>/)")
    made.add_argument("--no-summary-run", action="store_true", help="do not log the files to MLflow")
    made.add_argument("--status", action="store_true", help="list every job of the sweep with its state")
    made.add_argument("--sweep-dir", type=Path, default=None, help="with --status: a multirun/<date>/<time> folder")
    for option, what, key in (("--margin-loss", "test loss, nats", "test_loss"), ("--margin-speed", "tokens/s, relative", "speed")):
        made.add_argument(option, type=float, default=None, help=f"equivalence margin of {what} (report.margin.{key}; {default_margin(key)})")
    made.add_argument(
        "--pair", action="append", default=None, metavar="A:B", help="compare B against A (repeatable; replaces the study's pairs)"
    )
    made.add_argument(
        "--plan", action="store_true", help="from the experiment's runs as a pilot: seeds and device-hours to decide each comparison"
    )
    argv = cli.renamed_option(argv, "--experiment", "--experiment-name", "the MLflow experiment; experiment= is the preset group")
    return cli.parse(made, argv)


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


def partial_report(analysis: Analysis, sweep: Run, out: Path | None) -> int:
    """A report taken while the sweep runs: read only. It is printed (and written only to an explicit
    --out); the sweep's run and reports/<experiment>/ get the full report when the sweep ends."""
    print(terminal_text(analysis))
    if out is not None:
        write(analysis, out)
        print(f"\nwritten to {out}")
    tags = sweep.data.tags
    where = f"pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}"
    note = (
        f"note: sweep run {sweep.info.run_id} of {analysis.experiment!r} is still running ({where}): this report is partial "
        f"({len(analysis.runs)} runs so far); nothing was written to the sweep run or to the reports folder, which get "
        "the full report when the sweep ends (--out DIR saves this one)"
    )
    print("", *fit([note]), sep="\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return cli.run(lambda: named_as_given(args), failures=(ReportError, StoreError))


def named_as_given(args: argparse.Namespace) -> int:
    """`report(args)`, its store's refusal naming `--tracking-uri` when that is where the URI came from
    (the store names the config's key, `logger.tracking_uri`, which the training commands take)."""
    shown = redact_uri(args.tracking_uri or "")  # the store's messages show the URI without its secrets
    key = f"logger.tracking_uri={shown}"

    def as_given(text: str) -> str:
        if args.tracking_uri and text.startswith(key):
            return text.replace(key, f"--tracking-uri {shown}", 1).replace("drop the override to track in", "drop --tracking-uri to read")
        return text

    try:
        return report(args)
    except ServerLost as err:  # its database or the server died: a fault, said in one line without a run's words
        raise ReportError(as_given(err.what)) from None
    except TeamServerDown as err:  # the address is a team server's: a failed read (exit 1), not a wrong command line
        raise ReportError(as_given(str(err))) from None
    except paths.ConfigError as err:
        if as_given(str(err)) != str(err):
            raise paths.ConfigError(as_given(str(err))) from None
        raise


def report(args: argparse.Namespace) -> int:
    # --plan also takes the sweeper's settings (hydra.sweeper.*), which only the sweeper's config has.
    sweeper = [o for o in args.overrides if o.startswith("hydra.sweeper.")] if args.plan else []
    overrides = [o for o in args.overrides if o not in sweeper]
    cfg = paths.compose(overrides)  # the store, experiment and folders that training would use
    for text in args.pair or []:
        if len(text.split(":")) != 2 or not all(text.split(":")):
            raise paths.ConfigError(f"--pair: each is A:B (compare variant B against variant A), got {text!r}")
    pairs = [p.split(":") for p in args.pair] if args.pair else None
    report_cfg = OmegaConf.to_container(cfg.get("report") or {}, resolve=True)
    # report.claims: each file read and checked before the store is opened
    chosen = report_settings(report_cfg, args.margin_loss, args.margin_speed, pairs)
    if not args.tracking_uri and not cfg.logger.enabled:
        raise paths.ConfigError("logger: tracking is off (logger=none), so no store holds runs to report; drop logger=none, or give --tracking-uri")
    uri = args.tracking_uri or str(cfg.logger.tracking_uri)
    from_sweep_dir = args.sweep_dir is not None and args.experiment_name is None
    experiment = args.experiment_name or str(cfg.experiment_name)
    if args.plan:
        from src.report.commands.plan import plan_command

        print(plan_command(experiment, uri, [*overrides, *sweeper], chosen.margins, chosen.pairs, preflight_hours, chosen.reference))
        return cli.OK
    stale_after_s = float(cfg.sweep.stale_after_s)  # the runs' states as --status judges them
    if args.status or args.sweep_dir:
        if args.sweep_dir is not None and not (args.sweep_dir / JOBS_FILE).is_file():
            what = f"holds no {JOBS_FILE} (the job list a sweep writes as it starts)" if args.sweep_dir.is_dir() else "no such folder"
            raise paths.ConfigError(f"--sweep-dir {args.sweep_dir}: {what}; point it at a sweep's multirun/<date>/<time> folder")
        print(status_text(None if from_sweep_dir else experiment, uri, args.sweep_dir, stale_after_s))
        return cli.OK
    out = args.out or report_folder(cfg.paths.reports_dir, experiment)
    # Found before the report is computed, not as its first file is written.
    paths.require_writable(out, "--out" if args.out else "paths.reports_dir", f"the report's files go to {out}: choose a writable folder")
    # The experiment's sweep run that a live process is still running (None: none, or no such experiment).
    store = open_store(uri)
    listed = store.find_experiment(experiment)
    running = running_sweep(store, listed.experiment_id, stale_after_s) if listed is not None else None
    found = analyze(experiment, uri, chosen, stale_after_s)  # partial or full: report.claims
    if running is not None:
        return partial_report(found, running, args.out)
    analysis = generate_report(found, out, log_summary=not args.no_summary_run)
    print(terminal_text(analysis))
    print(f"\nwritten to {out}")
    print(links_text("in the MLflow UI (python -m src.ui):", ui_links(analysis, ui_base(cfg.logger))))
    return cli.OK


if __name__ == "__main__":
    sys.exit(main())
