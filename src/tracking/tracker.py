"""MLflow tracking: one experiment per sweep, one run per job, closed exactly once.

Lightning's MLFlowLogger reads MLFLOW_TRACKING_URI when it is imported, and it closes the run at the
end of `fit` (before `test`) and again on errors. The tracker below creates the run through the
store, passes the URI explicitly, sends Lightning's metrics through the store too, and closes the
run itself, once, with the real outcome: FINISHED, or FAILED for a crash or a divergence.

The tracker takes a `RecordSpec`, the few resolved values a run's record needs, and the job's `Store`
(already checked); the training config itself stays with the entry point (`RecordSpec.from_config`,
src/tracking/record.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only

from src.core.terminal import say
from src.data.cache import read_meta
from src.tracking import unsent
from src.tracking.code import MANIFEST_ARTIFACT
from src.tracking.datasets import log_datasets
from src.tracking.environment import environment_tags
from src.tracking.git import git_state
from src.tracking.record import RecordSpec
from src.tracking.server_client import ServerLost, server_lost
from src.tracking.store import Store
from src.tracking.store_uri import is_server, redact_text
from src.tracking.summary import SUMMARY_STEP
from src.tracking.sweep import REQUIRED_FINAL_METRICS, liveness_tags
from src.tracking.tags import (
    FAILED,
    FINGERPRINT_TAG,
    FINISHED,
    HEARTBEAT_TAG,
    JOB_NUM_TAG,
    MISSING_STEPS_TAG,
    NOTE_TAG,
    OUTCOME_STATUS,
    OUTCOME_TAG,
    PARENT_TAG,
    RESUMED_TAG,
    RUNNING,
)

CONFIG_ARTIFACT = "config/config.yaml"  # the resolved config, without this machine's paths
MACHINE_PATHS_ARTIFACT = "config/machine_paths.yaml"  # where this run read and wrote, on its machine
OVERRIDES_ARTIFACT = "config/overrides.txt"
DIFF_ARTIFACT = "git/diff.patch"


@dataclass(frozen=True)
class TokenCacheRef:
    """The token cache a run reads: its key (corpus, split, tokenizer), folder and the splits used."""

    cache_key: str
    folder: Path
    splits: tuple[str, ...]


class _ClosedByTracker(MLFlowLogger):
    """An MLFlowLogger that writes through the store (Lightning's own client only reads the run),
    that Lightning cannot close (the Tracker closes the run once with the outcome), and that never
    logs a step twice: a resumed run skips the steps already in MLflow.

    To a tracking server (`background=True`) the per-step metrics go through MLflow's asynchronous
    logging queue (`Store.log_metrics_in_background`), so a step never waits on the network; each
    step first looks at the writes already sent, and the first one that failed (after the bounded
    retries of `server_client.bound_http_requests`) stops the run with `ServerLost`. A slow server
    only lengthens the queue.
    """

    log_after_step = 0

    def __init__(
        self, *args: Any, store: Store, background: bool = False, unsent_file: Path | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.store = store
        self.background = background
        self.unsent_file = unsent_file  # where the writes a lost server never acknowledged are kept
        self.lost: ServerLost | None = None
        # One entry per write not yet acknowledged, oldest first: its step, its time (ms), its metrics, its futures.
        self._pending: deque[tuple[int, int, dict[str, float], list[Future[Any]]]] = deque()

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is not None and step <= self.log_after_step:
            return
        numbers = {k: float(v) for k, v in metrics.items() if not isinstance(v, str)}
        if not self.background:
            self.store.log_metrics(self.run_id, numbers, step or 0)
            return
        made = int(time.time() * 1000)  # the step's own time, kept with it if it must be resent
        if self.lost is not None:  # nothing reaches the server now: kept for the resumed run to send
            self.keep_unsent([(step or 0, made, numbers)])
            return
        try:
            self._raise_if_failed()
        except ServerLost:
            self.keep_unsent([(step or 0, made, numbers)])  # this step too: it was never queued
            raise
        futures = self.store.log_metrics_in_background(self.run_id, numbers, step or 0, made)
        self._pending.append((step or 0, made, numbers, futures))

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        """Nothing: the run's params are the Tracker's (`Tracker.log_inputs`), written once."""

    def _raise_if_failed(self, wait: bool = False) -> None:
        """Drop the writes that are done; raise `ServerLost` for the first that failed, keeping on
        disk every write not acknowledged (that one and those queued after it)."""
        while self._pending:
            futures = self._pending[0][3]
            if not wait and not all(f.done() for f in futures):
                return
            err = next((e for e in (f.exception() for f in futures) if e is not None), None)
            if err is not None:
                raise self.lose(server_lost(self._tracking_uri, err, "logging metrics"))
            self._pending.popleft()

    def lose(self, lost: ServerLost) -> ServerLost:
        """The server is lost: nothing more is sent, and what it has not acknowledged is kept."""
        self.lost = lost
        self.keep_unsent([])
        return lost

    def keep_unsent(self, extra: list[tuple[int, int, dict[str, float]]]) -> None:
        """Write the pending writes (and `extra`: step, time in ms, metrics) to the unsent file beside
        the checkpoint. A pending write may still land: the resumed run sends only what MLflow does not
        hold by then."""
        records = [(step, made, metrics) for step, made, metrics, _ in self._pending] + extra
        self._pending.clear()
        if self.unsent_file is not None and self.run_id is not None and records:
            unsent.keep(self.unsent_file, self.run_id, records)

    def drain(self) -> None:
        """Wait for every metric sent in the background (each write is bounded); `ServerLost` if one failed."""
        if self.lost is not None:
            raise self.lost
        self._raise_if_failed(wait=True)

    def finalize(self, status: str = "success") -> None:
        pass


class Tracker:
    """The MLflow run of one training job: a new run, or an existing one continued (`run_id`)."""

    def __init__(
        self,
        store: Store,
        spec: RecordSpec,
        fingerprint: str,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        device: str = "cpu",
        checkpoint_folder: Path | None = None,
    ) -> None:
        """`device`: the device the run trains on, named in the env.* tags; `checkpoint_folder`: where
        the metrics a lost server never acknowledged are kept for the resumed run (src.tracking.unsent)."""
        experiment_id = store.experiment_id(spec.experiment_name, spec.artifact_location)
        self.store = store
        self.spec = spec
        self.cut_short = False  # its unsent-metrics file was cut short: its curve may keep a gap (`_say_gap`)
        self.git = git_state()
        tags = {
            **spec.tags,
            **self.git.tags(),
            **spec.code.tags(),  # the code that can change the result (files, torch, Lightning, a user norm's file)
            **environment_tags(spec.world_size, device),  # versions, device, host, world size
            OUTCOME_TAG: RUNNING,
            FINGERPRINT_TAG: fingerprint,
            **liveness_tags(),
        }
        if spec.job_num is not None:
            tags[JOB_NUM_TAG] = str(spec.job_num)
        if parent_run_id and not run_id:
            tags[PARENT_TAG] = parent_run_id
        self.resumed = run_id is not None
        logged_step = 0
        unsent_file = unsent.unsent_path(checkpoint_folder)
        if rank_zero_only.rank == 0:  # rank 0 writes the run through the store; the logger below only reads it
            # What a lost server never acknowledged first: a resumed run starts past those steps and
            # would not log them again, and they count among the steps already logged below.
            sent = unsent.send(store, unsent_file)
            self.cut_short = sent.cut
            for note in sent.notes:
                say(f"[normsweep] {spec.run_name}: {note}")
            if run_id is None:
                # Created now, through the store: once this returns, another copy of the sweep sees it
                # RUNNING (the claim on its config is released after this).
                run_id = store.create_run(experiment_id, spec.run_name, tags)
            else:
                # The run was closed (KILLED) when its last segment stopped; it is live again, and
                # logs after the highest step of its loss already in MLflow.
                store.reopen(run_id)
                store.set_tags(run_id, {OUTCOME_TAG: RUNNING, RESUMED_TAG: "true", **liveness_tags()})
                logged_step = max((m.step for m in store.metric_history(run_id, "train/train_loss")), default=0)
        self.logger = _ClosedByTracker(
            experiment_name=spec.experiment_name,
            run_name=spec.run_name,
            tracking_uri=store.uri,
            store=store,
            run_id=run_id,
            background=is_server(store.uri),  # per-step metrics never wait on the network
            unsent_file=unsent_file,
        )
        self.logger.log_after_step = logged_step
        self.closed = False
        self.system_metrics = self._start_system_metrics(spec.system_metrics_s)
        self._last_beat = time.monotonic()

    def _start_system_metrics(self, every_s: float) -> Any:
        """MLflow's own sampler of CPU, memory (and GPU) utilisation, on a thread of rank 0.
        Measured at 0.12-0.15% of one core at one sample per 10 s (docs/mlflow-ui.md)."""
        if every_s <= 0 or rank_zero_only.rank != 0:
            return None
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # Three INFO lines per run (started, stopping, terminated) would bury the run's own summary.
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)

        monitor = SystemMetricsMonitor(
            self.logger.run_id, sampling_interval=every_s, resume_logging=self.resumed,
            tracking_uri=self.store.uri,
        )  # fmt: skip
        monitor.start()
        return monitor

    def _stop_system_metrics(self) -> None:
        """Join the sampler, then record one last sample: a run shorter than one sampling interval
        would otherwise end with none. System metrics never fail a run."""
        monitor = self.system_metrics
        try:
            monitor.finish()
            monitor.collect_metrics()
            monitor.publish_metrics(monitor.aggregate_metrics())
            monitor.mlflow_logger.flush()
        except Exception as err:
            logging.getLogger(__name__).warning("system metrics not recorded: %s: %s", type(err).__name__, err)

    @property
    def run_id(self) -> str | None:
        return self.logger.run_id

    @rank_zero_only
    def log_inputs(self, extra_params: Mapping[str, Any], data: TokenCacheRef | None = None) -> None:
        """Params (once: MLflow params are immutable), the config artifacts and the dataset inputs
        (`data`: the token cache the run reads). A resumed run has them."""
        if self.resumed:
            return
        run_id = self.logger.run_id
        self.store.log_params(run_id, {**self.spec.params, **extra_params})
        self.store.log_text(run_id, self.spec.config_yaml, CONFIG_ARTIFACT)
        self.store.log_text(run_id, self.spec.machine_paths_yaml, MACHINE_PATHS_ARTIFACT)
        if data is not None:
            log_datasets(self.store, run_id, data.cache_key, read_meta(data.folder)["splits"], data.splits)
        self.store.log_text(run_id, redact_text("\n".join(self.spec.overrides)) + "\n", OVERRIDES_ARTIFACT)
        self.store.log_text(run_id, self.spec.code.manifest_json(), MANIFEST_ARTIFACT)  # names the files a later code changed
        if self.git.dirty:  # the commit alone does not say what ran
            self.store.log_text(run_id, self.git.diff, DIFF_ARTIFACT)

    @property
    def lost(self) -> bool:
        """The tracking server stopped answering during the run: nothing more is written to it."""
        return self.logger.lost is not None

    @rank_zero_only
    def heartbeat(self, every_s: float) -> None:
        """Refresh the heartbeat tag, at most every `every_s` seconds (a re-run tells live from lost)."""
        if time.monotonic() - self._last_beat >= every_s:
            self._last_beat = time.monotonic()
            try:
                self.set_tags({HEARTBEAT_TAG: f"{time.time():.0f}"})
            except Exception as err:
                if not is_server(self.store.uri):
                    raise
                raise self.logger.lose(server_lost(self.store.uri, err, "refreshing the heartbeat")) from None

    @rank_zero_only
    def log_final(self, metrics: Mapping[str, float]) -> None:
        """The run's final results, exactly once, in one batch, at SUMMARY_STEP (so MLflow's charts
        compare them as values, not one-dot curves).

        Written through the store, past the resume filter (a resumed run's last step is "already
        logged", but its results may not be); a key already in MLflow (written before a kill) is
        not written again.
        """
        self.logger.drain()  # the per-step metrics first: the summary comes after them
        stored = self._stored_metrics()
        missing = {k: float(v) for k, v in metrics.items() if k not in stored}
        if missing:
            self.store.log_metrics(self.logger.run_id, missing, step=SUMMARY_STEP)

    def missing_final_metrics(self) -> list[str]:
        """The required final metrics not (yet) in MLflow ([] on ranks other than 0)."""
        if rank_zero_only.rank != 0:
            return []
        stored = self._stored_metrics()
        return [k for k in REQUIRED_FINAL_METRICS if k not in stored]

    def _stored_metrics(self) -> dict[str, float]:
        run = self.store.get_run(self.logger.run_id)
        return run.data.metrics if run is not None else {}

    @rank_zero_only
    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.store.set_tags(self.logger.run_id, tags)

    def _gap(self) -> str:
        """The steps of the loss curve lost with a cut-short unsent file (`12-14`), said in the job's line;
        '' when the curve is whole after all (the lost part held steps trained again)."""
        held = [m.step for m in self.store.metric_history(self.logger.run_id, "train/train_loss") if m.step != SUMMARY_STEP]
        missing = unsent.missing_steps(held)
        if not missing:
            return ""
        gap = unsent.step_ranges(missing)
        say(f"[normsweep] {self.spec.run_name}: its loss curve misses step(s) {gap} for good (they were in the cut-off part of "
            f"its unsent metrics file); the run carries them in its tag {MISSING_STEPS_TAG}")  # fmt: skip
        return gap

    def close(self, outcome: str, note: str | None = None) -> None:
        """End the run: FINISHED for `finished`, FAILED for `diverged` or `failed`. Idempotent.

        `finished` without its final metrics in MLflow ends the run as `failed`, saying which are missing.
        """
        if self.closed:
            return
        if not self.lost:
            with contextlib.suppress(ServerLost):  # the metrics still queued land before the close
                self.logger.drain()
        if self.lost:
            # Every write would wait out the retries again; the run stays RUNNING until the next run
            # of its config, with the server back, settles it as lost and resumes it (src.tracking.sweep).
            self.closed = True
            if self.system_metrics is not None:
                with contextlib.suppress(Exception):  # its last write is bounded too
                    self.system_metrics.finish()
            return
        missing = self.missing_final_metrics() if outcome == FINISHED else []
        if missing:
            outcome, note = FAILED, f"final metrics missing from MLflow: {', '.join(missing)}"
        self.closed = True
        if self.system_metrics is not None:
            self._stop_system_metrics()
        gap = self._gap() if self.cut_short and rank_zero_only.rank == 0 else ""
        self.set_tags({OUTCOME_TAG: outcome, **({NOTE_TAG: note} if note else {}), **({MISSING_STEPS_TAG: gap} if gap else {})})
        if rank_zero_only.rank == 0:
            self.store.terminate(self.logger.run_id, OUTCOME_STATUS[outcome])
