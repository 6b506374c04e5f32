"""Print and save the sweep report when a Hydra multirun ends.

The report is a convenience on top of a sweep whose results are already in MLflow, so nothing
here may fail the sweep: any error becomes a warning on stderr.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from src.core.memory_peak import collection_held
from src.core.terminal import fit, say

if TYPE_CHECKING:
    from src.report.read.claims import ClaimsFile

SWEEP_STARTED_ENV = "NORMSWEEP_SWEEP_STARTED"  # unix time the multirun started (set by on_multirun_start)
# A share round at gpt2_small, gpt2_medium and gpt2_large (whole blocks on 1,024 tokens) took ~9 s at load
# average 6-7 on the 2-vCPU dev VM (src/bench/shares.py): the check's timeout grows by this much per round, with room.
SHARE_ROUND_S = 30.0


class SweepReport(Callback):
    def __init__(self, out_dir: str | None = None) -> None:
        # None: reports/<experiment>/ under paths.root_dir (the project root by default).
        self.out_dir = out_dir

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[SWEEP_STARTED_ENV] = f"{time.time():.0f}"

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            # Under torchrun every rank runs the sweep loop: one report is enough.
            if not config.logger.enabled or int(os.environ.get("RANK", "0")) != 0:
                return
            if self._another_copy_runs(config):
                return
            self._report(config)
        except Exception as err:  # any failure: a report must not fail a finished sweep
            say(f"[normsweep] warning: sweep report not generated: {type(err).__name__}: {err}", sys.stderr)

    @staticmethod
    def _another_copy_runs(config: DictConfig) -> bool:
        """Another copy of this sweep (same store) still trains some of its jobs: a report now would
        be partial (`0/1 ... running`) and log `sweep/<variant>.n_seeds=0` into the shared sweep run.
        The copy that ends last writes it, as `src.report` mid-sweep writes nothing."""
        from src.launch.sweep_end import still_running_elsewhere

        busy = still_running_elsewhere()
        if busy:
            say(f"[normsweep] report: not written by this copy: another copy of the sweep still trains "
                f"{len(busy)} of its jobs ({', '.join(busy)}); the last copy to end writes it "
                f"(python -m src.report --experiment-name {config.experiment_name} reads it meanwhile)")
        return bool(busy)

    @staticmethod
    def _speed_check(config: DictConfig, rounds: int, claims: Sequence[ClaimsFile]) -> None:
        """Interleaved steps of the swept variants, given at most as long as the jobs took."""
        from src.launch.speed_check import MIN_TIMEOUT_S, run_speed_check
        from src.tracking.sweep import JOBS_FILE, read_definition

        jobs_file = Path(config.hydra.sweep.dir) / JOBS_FILE
        if not jobs_file.exists():
            return
        started = os.environ.get(SWEEP_STARTED_ENV)
        elapsed = time.time() - float(started) if started else MIN_TIMEOUT_S
        from src.report.files import report_folder

        out_dir = report_folder(config.paths.reports_dir, config.experiment_name) / "bench"
        kernel_s = float(OmegaConf.select(config, "report.speed_kernel_s", default=0) or 0)
        jobs = read_definition(jobs_file.read_text())["jobs"]
        from src.tracking.store import Store

        store = Store.connect(str(config.logger.tracking_uri))
        experiment = store.find_experiment(str(config.experiment_name))
        # A chosen trend claim (a norm's share of a step over model sizes) is timed in the same check.
        sizes = tuple(dict.fromkeys(s for f in claims for s in f.trend_sizes()))
        share_rounds = int(OmegaConf.select(config, "report.share_rounds", default=0) or 0) if sizes else 0
        run_speed_check(
            jobs, rounds, out_dir, max(MIN_TIMEOUT_S, elapsed) + kernel_s + SHARE_ROUND_S * share_rounds, kernel_s,
            store, experiment.experiment_id if experiment else None, float(config.sweep.stale_after_s), (sizes, share_rounds),
        )  # fmt: skip

    def _report(self, config: DictConfig) -> None:
        from src.core.paths import register_resolvers  # the paths in the config use ${project_root:}

        register_resolvers()
        with collection_held(set_aside=True):  # late: MLflow, pandas, scipy and matplotlib are slow to import
            from src.report.analysis import analyze
            from src.report.files import report_folder
            from src.report.generate import generate_report
            from src.report.read.settings import report_settings
            from src.report.render.terminal import links_text, terminal_text, ui_links

        report_cfg = OmegaConf.select(config, "report", default=None)
        chosen = report_settings(OmegaConf.to_container(report_cfg, resolve=True) if report_cfg else None)
        rounds = int(OmegaConf.select(config, "report.speed_rounds", default=0) or 0)
        measuring = time.perf_counter()
        if rounds:
            self._speed_check(config, rounds, chosen.claims)
        measuring = time.perf_counter() - measuring if rounds else 0.0
        experiment = config.experiment_name
        out_dir = Path(self.out_dir) if self.out_dir else None
        reports = OmegaConf.select(config, "paths.reports_dir", default=None)
        if out_dir is None and reports:
            out_dir = report_folder(reports, experiment)
        found = analyze(experiment, config.logger.tracking_uri, chosen)
        analysis = generate_report(found, out_dir)
        print(terminal_text(analysis), flush=True)
        print(f"\nreport written to {analysis.files[0].parent}", flush=True)
        from src.tracking.ui_view import ui_base

        print(links_text("in the MLflow UI (make ui):", ui_links(analysis, ui_base(config.logger))), flush=True)
        self._time_split(config, measuring)

    @staticmethod
    def _time_split(config: DictConfig, measuring_s: float) -> None:
        from src.launch.time_split import sweep_time_line
        from src.tracking.store import Store
        from src.tracking.sweep import PARENT_ENV

        parent = os.environ.get(PARENT_ENV)
        store = Store.connect(str(config.logger.tracking_uri))
        experiment = store.find_experiment(str(config.experiment_name))
        if parent and experiment is not None:
            line = sweep_time_line(store, experiment.experiment_id, parent, measuring_s)
            if line:
                print(*fit([line]), sep="\n", flush=True)
