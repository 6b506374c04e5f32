"""Opening the MLflow store: safe when many processes open it at once, quick and clear when it cannot work.

A new SQLite store gets its schema from MLflow's alembic migrations the first time a process opens
it. Processes opening a fresh file at the same moment race in those migrations and can leave it
half-migrated (leftover `_alembic_tmp_*` tables) so that every later open fails; retrying cannot
fix that. Here every process takes an exclusive lock file beside the database (`mlflow.db.lock`)
while the schema is created or upgraded and the experiment is found or created; afterwards parallel
writers only meet SQLite's ordinary write lock, which `with_retry` rides out. The lock file is
never deleted: removing it while another process waits on it would let a third one in.

`check_store` runs before any data is prepared: a tracking server that does not answer, or a
SQLite file that cannot be written, fails within seconds with a `ConfigError` naming
`logger.tracking_uri` (MLflow's own HTTP client retries for minutes).

Torch-free: the Hydra callbacks, the report and the UI import it without loading the model.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit, urlunsplit

from src.paths import ConfigError
from src.tracking.identity import safe_folder_name

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

T = TypeVar("T")

FIELD = "logger.tracking_uri"
# MLflow 3's UI opens an experiment on its training runs (not on GenAI traces) with this tag.
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    # The experiment's description on MLflow's home page.
    "mlflow.note.content": "normsweep: one run per training job, each sweep a parent run with its jobs "
    "nested below; a sweep run's Artifacts hold report/report.html.",
}
# MLflow 3.17 opens an experiment on its GenAI pages unless the link (or the sidebar) says otherwise.
UI_TRAINING_VIEW = "workflowType=machine_learning"
LOCK_WAIT_S = 600.0  # a schema upgrade of a large store can take minutes; a dead holder frees it at once
PROBE_TIMEOUT_S = 4.0  # per attempt, connect and read
PROBE_RETRIES = 2  # with 0.5 s and 1 s back-off: at most ~14 s for a server that never answers
TMP_TABLE_PREFIX = "_alembic_tmp_"  # alembic's copy of a table being rebuilt on SQLite
# Tables MLflow fills in every new store; rows there are not user data.
STORE_METADATA_TABLES = {"alembic_version", "workspaces"}
DEFAULT_EXPERIMENT_ID = 0


class StoreError(ConfigError):
    """The tracking store cannot be used; the message names `logger.tracking_uri` and the cause."""


def redact_text(text: str) -> str:
    """`text` (a command line, a list of overrides) with every URI's `user:password@` removed."""
    return re.sub(r"(://)[^/@\s]+@", r"\1", text)


def redact_uri(uri: str) -> str:
    """`uri` without the user name and password (`http://user:pw@host` -> `http://host`)."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


# SQLite's write lock, and the marks of a schema change by a process that does not take our lock.
TRANSIENT_ERRORS = ("database is locked", "duplicate column", "already exists")


def with_retry(
    fn: Callable[[], T], attempts: int = 8, delay_s: float = 0.25, transient: tuple[str, ...] = TRANSIENT_ERRORS
) -> T:
    """Retry `fn` while SQLite reports a lock or a concurrent schema change (~1 min at most)."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:  # sqlalchemy's OperationalError arrives wrapped in MlflowException
            if not any(s in str(err).lower() for s in transient) or attempt == attempts - 1:
                raise
            time.sleep(delay_s * (2**attempt))
    raise AssertionError("unreachable")


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///...` URI; None for other stores and in-memory SQLite."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    path = tracking_uri.removeprefix("sqlite:///").split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


@contextlib.contextmanager
def store_lock(db: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the exclusive inter-process lock of the SQLite store `db` (not re-entrant)."""
    path = lock_path(db)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise StoreError(f"{FIELD}: cannot create the lock file {path} of the SQLite store: {err.strerror}") from err
    try:
        started = time.monotonic()
        waiting_logged = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited > wait_s:
                    raise StoreError(
                        f"{FIELD}: waited {wait_s:.0f} s for {path}, held by another process opening the store; "
                        "is one stuck? (`fuser` names it)"
                    ) from None
                if waited > 2 and not waiting_logged:  # a schema upgrade, or a stuck process
                    log.info("waiting for %s: another process is opening the MLflow store", path)
                    waiting_logged = True
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _user_rows(con: sqlite3.Connection) -> dict[str, int]:
    """Rows per table that a new store would not have (-1: unreadable, so assume data)."""
    tables = [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    counts: dict[str, int] = {}
    for table in tables:
        base = table.removeprefix(TMP_TABLE_PREFIX)
        if base in STORE_METADATA_TABLES or table.startswith("sqlite_"):
            continue
        # Every new store holds the Default experiment (id 0); any other experiment is the user's.
        where = f" WHERE experiment_id != {DEFAULT_EXPERIMENT_ID}" if base == "experiments" else ""
        try:
            n = con.execute(f'SELECT count(*) FROM "{table}"{where}').fetchone()[0]
        except sqlite3.Error:
            n = -1
        if n:
            counts[table] = n
    return counts


def _leftover_tables(con: sqlite3.Connection) -> list[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_alembic\\_tmp\\_%' ESCAPE '\\'")
    return sorted(name for (name,) in rows)


def _drop_all_tables(con: sqlite3.Connection) -> None:
    # In place rather than deleting the file: this process's SQLAlchemy engine may hold it open.
    con.execute("PRAGMA foreign_keys = OFF")
    tables = [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if not table.startswith("sqlite_"):
            con.execute(f'DROP TABLE IF EXISTS "{table}"')
    con.commit()


def _rebuild_if_empty(db: Path, why: str) -> bool:
    """Empty a store that cannot be opened when it provably holds no user data; False otherwise."""
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
            if _user_rows(con):
                return False
            _drop_all_tables(con)
    except sqlite3.Error:  # not a SQLite database at all, or unreadable: nothing provable
        return False
    log.warning("MLflow store %s %s; it held no runs and no experiments, so it was rebuilt", db, why)
    return True


def _recovery_advice(db: Path, leftovers: list[str]) -> str:
    steps = [f"back it up (cp {db} {db}.bak)"]
    if leftovers:
        drops = " ".join(f"DROP TABLE {t};" for t in leftovers)
        steps.append(f"for each leftover _alembic_tmp_X whose table X still exists, drop it (sqlite3 {db} '{drops}')")
    steps.append(f"run `mlflow db upgrade sqlite:///{db}`")
    return (
        f"to recover: {'; '.join(steps)}. If that fails, keep the backup and train into a new store "
        "(paths.mlflow_db=<new file>)"
    )


def _repair_half_migrated(db: Path, uri: str) -> None:
    """Rebuild a store that an interrupted migration left with `_alembic_tmp_*` tables, or refuse it."""
    if not db.exists():
        return
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
            leftovers = _leftover_tables(con)
            if not leftovers:
                return
            data = _user_rows(con)
    except sqlite3.Error:
        return  # not readable as SQLite: opening it reports MLflow's own reason

    why = f"was left half-migrated by an interrupted schema upgrade (leftover tables: {', '.join(leftovers)})"
    if data or not _rebuild_if_empty(db, why):
        held = ", ".join(f"{t}: {'?' if n < 0 else n} rows" for t, n in sorted(data.items()))
        raise StoreError(
            f"{FIELD}={redact_uri(uri)}: the SQLite store {db} {why} and holds data ({held}), "
            f"so it is not rebuilt automatically; {_recovery_advice(db, leftovers)}"
        )


def _check_sqlite_writable(db: Path, uri: str) -> None:
    """SQLite writes the file and, for its journal, the folder beside it. Creates nothing."""
    where = f"{FIELD}={redact_uri(uri)}"
    folder = db.parent.absolute()
    while not folder.exists():  # the folders are made when the store is created; check where they would be
        folder = folder.parent
    if not folder.is_dir():
        raise StoreError(f"{where}: {folder} is not a folder, so the SQLite store {db} cannot be created there")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as err:
        raise StoreError(
            f"{where}: the folder {folder} is not writable ({err.strerror}); SQLite writes the database and "
            "its journal there: point paths.mlflow_db at a writable place"
        ) from err
    if db.exists() and not os.access(db, os.W_OK):
        raise StoreError(f"{where}: the SQLite store {db} is read-only: point paths.mlflow_db at a writable file")


def _open_client(uri: str, db: Path) -> MlflowClient:
    """A client whose store is open: the first query creates or upgrades the schema (hold the lock).

    A store that still cannot be opened is rebuilt when it holds no data, and refused otherwise.
    """
    from mlflow.tracking import MlflowClient  # imported late: MLflow is slow to import

    def open_client() -> MlflowClient:
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)
        return client

    # Under the lock nobody else migrates: only SQLite's write lock is worth waiting for.
    try:
        return with_retry(open_client, transient=("database is locked",))
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if db.exists() and _rebuild_if_empty(db, f"could not be opened ({first_line})"):
            return with_retry(open_client, transient=("database is locked",))
        raise StoreError(
            f"{FIELD}={redact_uri(uri)}: MLflow cannot open the SQLite store {db}: {first_line}; "
            f"{_recovery_advice(db, [])}"
        ) from err


def _with_sqlite_store(uri: str, db: Path, action: Callable[[MlflowClient], T]) -> T:
    """Open the SQLite store `db` and run `action` on it, holding the store's lock throughout."""
    with store_lock(db):
        _repair_half_migrated(db, uri)
        client = _open_client(uri, db)
        return with_retry(lambda: action(client))


def open_client(tracking_uri: str) -> MlflowClient:
    """A client whose store is ready: a SQLite schema is created or upgraded under the store's lock,
    so a reader (the report, the UI) never races a writer's first open."""
    db = sqlite_path(tracking_uri)
    if db is not None:
        return _with_sqlite_store(tracking_uri, db, lambda client: client)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri)


def _short_cause(text: str, uri: str) -> str:
    """The reason inside urllib3's nested retry message, e.g. "Connection refused"."""
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if errno:
        return errno.group(1).strip()
    if "timed out" in text.lower() or "timeout" in text.lower():
        return f"no answer within {PROBE_TIMEOUT_S:.0f} s, {PROBE_RETRIES} retries"
    return text.replace(uri, redact_uri(uri))[-200:]  # MLflow's message quotes the full URL


def _probe_server(uri: str) -> None:
    """One small API call with bounded retries: does an MLflow tracking server answer at `uri`?"""
    try:
        from mlflow.utils.credentials import get_default_host_creds
    except ImportError:  # MLflow 2.x
        from mlflow.tracking._tracking_service.utils import _get_default_host_creds as get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    where = f"{FIELD}={redact_uri(uri)}"
    try:
        response = http_request(
            get_default_host_creds(uri),
            "/api/2.0/mlflow/experiments/search",
            "POST",
            json={"max_results": 1},
            max_retries=PROBE_RETRIES,
            backoff_factor=0.5,
            timeout=PROBE_TIMEOUT_S,
            raise_on_status=False,
        )
    except Exception as err:  # connection refused, DNS, TLS, timeouts after the retries
        raise StoreError(
            f"{where}: no MLflow tracking server answers there ({_short_cause(str(err), uri)}); start it "
            "(`mlflow server --backend-store-uri ...`), fix the address, or drop the override to track in "
            "the local SQLite store"
        ) from err
    if response.status_code in (401, 403):
        raise StoreError(
            f"{where}: the tracking server refused the credentials (HTTP {response.status_code}); "
            "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
        )
    if response.status_code != 200:
        raise StoreError(
            f"{where}: a server answers there, but not as an MLflow tracking server "
            f"(HTTP {response.status_code} from /api/2.0/mlflow/experiments/search)"
        )


def check_store(tracking_uri: str) -> None:
    """Fail fast, before any data is prepared, when the store cannot take this run's records.

    SQLite: the folder must be writable, and an existing store must open (under the lock, where a
    half-migrated one is rebuilt or refused); a new one is not created yet, so a run refused later
    for another reason leaves nothing behind. HTTP(S): a tracking server must answer. Other stores
    are left to MLflow.
    """
    db = sqlite_path(tracking_uri)
    if db is not None:
        _check_sqlite_writable(db, tracking_uri)
        if db.exists():
            _with_sqlite_store(tracking_uri, db, lambda client: None)
    elif tracking_uri.startswith(("http://", "https://")):
        _probe_server(tracking_uri)


def ensure_experiment(tracking_uri: str, name: str, artifact_location: str | None) -> str:
    """Find or create the experiment `name` and return its id; a new one is tagged as model training."""
    if artifact_location and "://" not in artifact_location:
        Path(artifact_location).mkdir(parents=True, exist_ok=True)
        artifact_location = Path(artifact_location).resolve().as_uri()

    def get_or_create(client: MlflowClient) -> str:
        found = client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise ConfigError(
                    f"experiment_name={name}: this MLflow experiment is deleted; restore it in the UI "
                    "or choose another experiment_name"
                )
            return found.experiment_id
        # The folder is a safe name (no separators, no `..`); the experiment keeps the name as written.
        folder = safe_folder_name(name, "experiment_name")
        experiment_location = f"{artifact_location}/{folder}" if artifact_location else None
        return client.create_experiment(name, artifact_location=experiment_location, tags=EXPERIMENT_TAGS)

    db = sqlite_path(tracking_uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        return _with_sqlite_store(tracking_uri, db, get_or_create)

    from mlflow.tracking import MlflowClient

    return with_retry(lambda: get_or_create(MlflowClient(tracking_uri)))
