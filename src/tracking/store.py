"""The one door to the MLflow store: every read and write of a job, a sweep, the report and the bench.

`Store.connect(uri)` checks the store once, in the first seconds, before any data is prepared:

- the URI by itself, in one pass (src.tracking.store_uri): credentials in it are refused, and so
  is a scheme MLflow has no store for, a SQLite database path that is a folder, read-only or in a
  folder SQLite cannot write, and a database driver that is not installed;
- SQLite: an existing store opens (its schema upgraded under a lock file, a half-migrated one
  rebuilt when it holds no data, else refused: src.tracking.sqlite_file);
- HTTP(S): a tracking server answers within seconds, and every later request of the process is
  bounded (src.tracking.server_client).

A new store is created by the first write, not by the check nor by a read (a store not created yet
holds nothing), so a run refused later for another reason leaves nothing behind. Every write rides out SQLite's write lock (src.tracking.retry), and
MLflow's batch limits are applied here, once.

Only this module constructs an `MlflowClient` of ours; Lightning's MLFlowLogger (src.tracking.tracker)
is given the same URI and a run made here, and its own client only reads it. Torch-free: the Hydra
callbacks, the report and the UI import it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from src.core.atomic_io import LockTimeout, exclusive
from src.core.interrupts import whole_on_ctrl_c
from src.core.paths import ConfigError
from src.tracking.identity import safe_folder_name
from src.tracking.retry import with_retry
from src.tracking.server_client import bound_http_requests, probe_server, ride_out_restart
from src.tracking.sqlite_file import rebuild_if_empty, recovery_advice, repair_half_migrated
from src.tracking.store_uri import FIELD, StoreError, check_uri, is_server, redact_uri, sqlite_path
from src.tracking.tags import EXPERIMENT_KIND_TAG, NOTE_TAG

if TYPE_CHECKING:
    import pandas as pd
    from mlflow.entities import DatasetInput, Experiment, Metric, Run
    from mlflow.tracking import MlflowClient


EXPERIMENT_TAGS = {
    EXPERIMENT_KIND_TAG: "custom_model_development",  # MLflow 3's UI: training runs, not GenAI traces
    # The experiment's description on MLflow's home page.
    NOTE_TAG: "normsweep: one run per training job, each sweep a parent run with its jobs "
    "nested below; a sweep run's Artifacts hold report/report.html.",
}
T = TypeVar("T")
BATCH_MAX = 100  # params per log_batch call (MLflow's limit)
NAME_MAX = 250  # characters of an experiment's or a run's name (MLflow stores at most 256)
PARAM_VALUE_MAX = 6000  # characters of a param's value (MLflow 3's limit)
SEARCH_PAGE_MAX = 1000  # runs per search_runs page (MLflow's default page size)


LOCK_WAIT_S = 600.0  # a schema upgrade of a large store can take minutes; a dead holder frees it at once


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


@contextlib.contextmanager
def store_lock(db: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the exclusive inter-process lock of the SQLite store `db` (not re-entrant)."""
    path = lock_path(db)
    held = exclusive(path, wait_s, what="opening the MLflow store")
    try:
        held.__enter__()
    except LockTimeout as err:
        raise StoreError(f"{FIELD}: {err} (opening the store); is one stuck? (`fuser {path}` names it)") from None
    except OSError as err:
        raise StoreError(f"{FIELD}: cannot create the lock file {path} of the SQLite store: {err.strerror}") from err
    try:
        yield
    finally:
        held.__exit__(None, None, None)


def _open_sqlite_client(uri: str, db: Path) -> MlflowClient:
    """A client whose store is open: the first query creates or upgrades the schema (hold the lock).

    A store that still cannot be opened is rebuilt when it holds no data, and refused otherwise.
    """
    from mlflow.tracking import MlflowClient  # imported late: MLflow is slow to import

    def open_client() -> MlflowClient:
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)
        return client

    repair_half_migrated(db, uri)
    try:
        return with_retry(open_client)
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if db.exists() and rebuild_if_empty(db, f"could not be opened ({first_line})"):
            return with_retry(open_client)
        raise StoreError(
            f"{FIELD}={redact_uri(uri)}: MLflow cannot open the SQLite store {db}: {first_line}; "
            f"{recovery_advice(db, [])}"
        ) from err


# --- the door ------------------------------------------------------------------------------------


# MLflow's own lines in normsweep's output, off unless the user set them (MLflow's public settings): the
# "Downloading artifacts" progress bar of every small file the report reads or a table it appends to, and
# the "🏃 View run ... / 🧪 View experiment ..." pair a run against an http:// store prints as it ends
# (normsweep's own line names the run, and `make ui` / the printed links open it).
QUIET_MLFLOW_ENV = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


def _whole(fn: Callable[[], T]) -> T:
    """`fn` called whole under Ctrl+C (`whole_on_ctrl_c`)."""
    with whole_on_ctrl_c():
        return fn()


class Store:
    """One MLflow store, checked once (`connect`) and opened once (the first use of `client`).

    The methods are what the project reads and writes; each call rides out SQLite's write lock
    (`with_retry`), except the per-step metrics queued in the background.
    """

    def __init__(self, uri: str) -> None:
        for key, value in QUIET_MLFLOW_ENV.items():  # MLflow reads them at each call: set before any
            os.environ.setdefault(key, value)
        self.uri = uri
        self.db = sqlite_path(uri)
        self._client: MlflowClient | None = None
        self._experiments: dict[str, str] = {}

    @classmethod
    def connect(cls, uri: str) -> Store:
        """Check the store in the first seconds (see the module's docstring); raises `StoreError`."""
        check_uri(uri)
        store = cls(uri)
        if store.db is not None and store.db.exists():
            store.client  # noqa: B018 - open it now: upgrade, repair or refuse before any data is prepared
        elif is_server(uri):
            probe_server(uri)
            bound_http_requests()
        return store

    def _retry(self, fn: Callable[[], T]) -> T:
        """`fn` through `with_retry`, each try of a database store whole under Ctrl+C
        (`whole_on_ctrl_c`); to a server this process reached, also through a restart of it
        (`ride_out_restart`: `ServerLost` once it has not come back)."""
        if self.db is not None or not is_server(self.uri):
            return with_retry(lambda: _whole(fn))  # each try whole; Ctrl+C still ends the waits between them
        return ride_out_restart(self.uri, lambda: with_retry(fn), "recording this job")

    @property
    def client(self) -> MlflowClient:
        """The store's client; a SQLite store is created or upgraded under its lock on first use."""
        if self._client is None:
            if self.db is not None:
                self.db.parent.mkdir(parents=True, exist_ok=True)
                with store_lock(self.db):
                    if not self.db.exists():  # a copy of an empty store, not MLflow's migrations run again
                        from src.tracking.store_template import seed_new_store

                        seed_new_store(self.db)
                    self._client = _open_sqlite_client(self.uri, self.db)
            else:
                from mlflow.tracking import MlflowClient

                self._client = MlflowClient(self.uri)
        return self._client

    def __repr__(self) -> str:
        return f"Store({redact_uri(self.uri)!r})"

    @property
    def not_created(self) -> bool:
        """A SQLite store whose file does not exist yet: it holds nothing, and a read must not create
        it (opening the client would), so a command refused after looking in it leaves no file."""
        return self._client is None and self.db is not None and not self.db.exists()

    # --- experiments ---

    def experiment_id(self, name: str, artifact_location: str | None) -> str:
        """Find or create the experiment `name`; a new one is tagged as model training."""
        if name in self._experiments:
            return self._experiments[name]
        if artifact_location and "://" not in artifact_location:
            Path(artifact_location).mkdir(parents=True, exist_ok=True)
            artifact_location = Path(artifact_location).resolve().as_uri()

        def get_or_create() -> str:
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                if found.lifecycle_stage == "deleted":
                    raise ConfigError(
                        f"experiment_name={name}: this MLflow experiment is deleted; restore it in the UI "
                        "or choose another experiment_name"
                    )
                return found.experiment_id
            # The folder is a safe name (no separators, no `..`); the experiment keeps the name as written.
            folder = safe_folder_name(name, "experiment_name")
            location = f"{artifact_location}/{folder}" if artifact_location else None
            return self.client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_TAGS)

        self.client  # noqa: B018 - open first: store_lock is not re-entrant
        if self.db is not None:  # two processes creating one experiment: the second finds it under the lock
            with store_lock(self.db):
                found = self._retry(get_or_create)
        else:  # a server: the second creator gets RESOURCE_ALREADY_EXISTS, and its retry finds it
            found = self._retry(get_or_create)
        self._experiments[name] = found
        return found

    def find_experiment(self, name: str) -> Experiment | None:
        """The live experiment `name`, or None."""
        if self.not_created:
            return None
        found = self._retry(lambda: self.client.get_experiment_by_name(name))
        return None if found is None or found.lifecycle_stage == "deleted" else found

    def experiments(self) -> list[Experiment]:
        """The store's live experiments."""
        if self.not_created:
            return []
        return list(self._retry(self.client.search_experiments))

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        return dict(self._retry(lambda: self.client.get_experiment(experiment_id)).tags)

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self._retry(lambda: self.client.set_experiment_tag(experiment_id, key, value))

    def delete_experiment_tag(self, experiment_id: str, key: str) -> None:
        self._retry(lambda: self.client.delete_experiment_tag(experiment_id, key))

    def experiment_names(self) -> list[str]:
        return sorted(e.name for e in self.experiments())

    # --- reading runs ---

    def get_run(self, run_id: str) -> Run | None:
        """The run, or None when the store has no such run."""
        from mlflow.exceptions import MlflowException

        if self.not_created:
            return None
        try:
            return self._retry(lambda: self.client.get_run(run_id))
        except MlflowException:
            return None

    def runs(
        self, experiment_id: str, filter_string: str = "", order_by: Sequence[str] = (), most: int | None = None
    ) -> list[Run]:
        """The experiment's live runs matching `filter_string`, every page (or the first `most`)."""
        from mlflow.entities import ViewType

        runs: list[Run] = []
        if self.not_created:
            return runs
        token = None
        while True:
            page = self._retry(
                lambda token=token: self.client.search_runs(
                    [experiment_id],
                    filter_string=filter_string,
                    run_view_type=ViewType.ACTIVE_ONLY,
                    order_by=list(order_by) or None,
                    max_results=min(most - len(runs), SEARCH_PAGE_MAX) if most else SEARCH_PAGE_MAX,
                    page_token=token,
                )
            )
            runs.extend(page)
            token = page.token
            if not token or (most and len(runs) >= most):
                return runs

    def runs_tagged(self, experiment_id: str, tag: str, value: str, most: int | None = None) -> list[Run]:
        """The experiment's live runs with `tag` = `value`, latest first."""
        return self.runs(experiment_id, f"tags.`{tag}` = '{value}'", ["attributes.start_time DESC"], most)

    def metric_history(self, run_id: str, key: str) -> list[Metric]:
        if self.not_created:
            return []
        return self._retry(lambda: self.client.get_metric_history(run_id, key))

    def read_text(self, run_id: str, artifact_path: str) -> str:
        """A small text artifact of the run."""
        with tempfile.TemporaryDirectory() as tmp:
            return Path(self._retry(lambda: self.client.download_artifacts(run_id, artifact_path, tmp))).read_text()

    # --- writing runs ---

    def create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str], start_time_ms: int | None = None) -> str:
        """A new RUNNING run, with the context tags MLflow's own API adds (user, source: the UI's columns);
        `start_time_ms` for a run recorded after its work began (its duration is then the work's)."""
        from mlflow.tracking.context.registry import resolve_tags

        full = resolve_tags(dict(tags))
        made = self._retry(lambda: self.client.create_run(experiment_id, start_time=start_time_ms, run_name=run_name, tags=full))
        return made.info.run_id

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """The tags in one write per MLflow batch (each `set_tag` was a SQLite commit of its own)."""
        from mlflow.entities import RunTag

        items = [RunTag(key, str(value)) for key, value in tags.items()]
        for i in range(0, len(items), BATCH_MAX):
            self._retry(lambda chunk=items[i : i + BATCH_MAX]: self.client.log_batch(run_id, tags=chunk))

    def delete_tag(self, run_id: str, key: str) -> None:
        self._retry(lambda: self.client.delete_tag(run_id, key))

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Params, once each (MLflow params are immutable), in batches of MLflow's limit."""
        from mlflow.entities import Param

        items = [Param(key, str(value)[:PARAM_VALUE_MAX]) for key, value in params.items()]
        for i in range(0, len(items), BATCH_MAX):
            self._retry(lambda chunk=items[i : i + BATCH_MAX]: self.client.log_batch(run_id, params=chunk))

    def log_metrics(
        self, run_id: str, metrics: Mapping[str, float], step: int = 0, timestamp_ms: int | None = None
    ) -> None:
        """`timestamp_ms`: when the values were made (a resent step keeps its own time); now by default."""
        from mlflow.entities import Metric

        at = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        items = [Metric(key, float(value), at, step) for key, value in metrics.items()]
        for i in range(0, len(items), BATCH_MAX):
            self._retry(lambda chunk=items[i : i + BATCH_MAX]: self.client.log_batch(run_id, metrics=chunk))

    def log_metrics_in_background(
        self, run_id: str, metrics: Mapping[str, float], step: int, timestamp_ms: int
    ) -> list[Future[Any]]:
        """Queue the metrics, made at `timestamp_ms`, on MLflow's asynchronous logging queue (to a
        server: a training step never waits on the network); the futures say when each write is done,
        or why it failed. Not retried here: MLflow's bounded HTTP retries (`bound_http_requests`) are
        the only ones."""
        from mlflow.entities import Metric

        items = [Metric(key, float(value), timestamp_ms, step) for key, value in metrics.items()]
        futures: list[Future[Any]] = []
        for i in range(0, len(items), BATCH_MAX):
            operations = self.client.log_batch(run_id, metrics=items[i : i + BATCH_MAX], synchronous=False)
            futures += operations._operation_futures if operations is not None else []
        return futures

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._retry(lambda: self.client.log_text(run_id, text, artifact_file))

    def log_files(self, run_id: str, paths: Iterable[Path], folder: str | None = None) -> None:
        for path in paths:
            self._retry(lambda p=path: self.client.log_artifact(run_id, str(p), folder))

    def reopen(self, run_id: str) -> None:
        """Mark a closed run RUNNING again (a resumed job, a re-run sweep)."""
        self._retry(lambda: self.client.update_run(run_id, status="RUNNING"))

    def terminate(self, run_id: str, status: str) -> None:
        """Close the run: FINISHED, FAILED or KILLED."""
        self._retry(lambda: self.client.set_terminated(run_id, status))

    # --- tables, dataset inputs ---

    def log_table(self, run_id: str, data: pd.DataFrame, artifact_file: str) -> None:
        """A table artifact (`*.json`) that MLflow's artifact viewer shows as a grid, written whole: it
        replaces a table of that name. (MLflow's `log_table` appends to one already there, so a report
        made again added its rows to the sweep run's tables each time.) The file is MLflow's own table
        format, and the run's `mlflow.loggedArtifacts` tag names it a table, as `log_table` does."""
        import json

        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

        self.log_text(run_id, data.to_json(orient="split", index=False, date_format="iso"), artifact_file)
        run = self.get_run(run_id)
        logged = json.loads(run.data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]")) if run is not None else []
        entry = {"path": artifact_file, "type": "table"}
        if entry not in logged:
            self.set_tags(run_id, {MLFLOW_LOGGED_ARTIFACTS: json.dumps([*logged, entry])})

    def log_inputs(self, run_id: str, datasets: Sequence[DatasetInput]) -> None:
        """Dataset inputs of the run (the UI's Datasets column)."""
        self._retry(lambda: self.client.log_inputs(run_id, datasets=list(datasets)))
