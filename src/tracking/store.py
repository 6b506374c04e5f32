"""The one door to the MLflow store: every read and write of a job, a sweep, the report and the bench.

`Store.connect(uri)` checks the store once, in the first seconds, before any data is prepared:

- the URI's form: credentials in it are refused (Hydra writes the command line to disk before any
  code of ours runs, and MLflow prints the URI); MLflow reads them from MLFLOW_TRACKING_USERNAME /
  MLFLOW_TRACKING_PASSWORD / MLFLOW_TRACKING_TOKEN instead;
- SQLite: the database path is a file (not a folder) in a writable folder, and an existing store
  opens (its schema upgraded, a half-migrated one rebuilt when it holds no data, else refused);
- HTTP(S): a tracking server answers within seconds (MLflow's own client retries for minutes), and
  every later request of the process is bounded (`bound_http_requests`): a server that dies during
  a run costs at most ~32 s per request instead of minutes of retries.

A new SQLite store gets its schema from MLflow's alembic migrations the first time a process opens
it. Processes opening a fresh file at the same moment race in those migrations and can leave it
half-migrated (leftover `_alembic_tmp_*` tables) so that every later open fails; retrying cannot
fix that. So every process takes an exclusive lock file beside the database (`mlflow.db.lock`,
src.locks) while the schema is created or upgraded and while an experiment is found or created;
afterwards parallel writers only meet SQLite's ordinary write lock, which SQLite's busy timeout
(MLflow sets 20 s) and `with_retry` ride out. A new store is created by the first write, not by the
check, so a run refused later for another reason leaves nothing behind.

Only this module constructs an `MlflowClient`; Lightning's MLFlowLogger (src.tracking.tracker) is
given the same URI. Torch-free: the Hydra callbacks, the report and the UI import it.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from src.locks import LockTimeout, exclusive
from src.paths import ConfigError, nearest_existing, unwritable_reason
from src.tracking.identity import safe_folder_name
from src.tracking.tags import EXPERIMENT_KIND_TAG, NOTE_TAG

if TYPE_CHECKING:
    import pandas as pd
    from mlflow.entities import DatasetInput, Experiment, Metric, Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

T = TypeVar("T")

FIELD = "logger.tracking_uri"
DB_FIELD = "paths.mlflow_db"
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
EXPERIMENT_TAGS = {
    EXPERIMENT_KIND_TAG: "custom_model_development",  # MLflow 3's UI: training runs, not GenAI traces
    # The experiment's description on MLflow's home page.
    NOTE_TAG: "normsweep: one run per training job, each sweep a parent run with its jobs "
    "nested below; a sweep run's Artifacts hold report/report.html.",
}
LOCK_WAIT_S = 600.0  # a schema upgrade of a large store can take minutes; a dead holder frees it at once
PROBE_TIMEOUT_S = 8.0  # per attempt, connect and read (a basic-auth server hashes each password: slow on a busy host)
PROBE_RETRIES = 2  # with 0.5 s and 1 s back-off: at most ~26 s for a server that never answers
PROBE_BACKOFF_S = 0.5
RETRY_ATTEMPTS = 8  # with 0.25 s doubling: ~1 min on top of SQLite's own busy timeout
RETRY_DELAY_S = 0.25
TMP_TABLE_PREFIX = "_alembic_tmp_"  # alembic's copy of a table being rebuilt on SQLite
# Tables MLflow fills in every new store; rows there are not user data.
STORE_METADATA_TABLES = {"alembic_version", "workspaces"}
DEFAULT_EXPERIMENT_ID = 0
BATCH_MAX = 100  # params per log_batch call (MLflow's limit)
PARAM_VALUE_MAX = 6000  # characters of a param's value (MLflow 3's limit)
SQLITE_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
# SQLite's extended code once the open database file was unlinked or renamed (named in Python >= 3.11).
SQLITE_READONLY_DBMOVED = getattr(sqlite3, "SQLITE_READONLY_DBMOVED", 1032)
DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
STORE_FULL, STORE_GONE = "full", "gone"  # what store_fault finds
# MLflow's HTTP client during a run, for http(s) stores: 3 tries 10 s each, 0 s then 2 s apart. A
# refused connection (a dead server) fails a request in ~2 s, a server that accepts and never
# answers in ~32 s; a slow one has 10 s per request. The metrics queued in the background
# (src.tracking.tracker) go out as one request per 2 s instead of one per step: measured, one per
# step still cost a step 33% (scripts/bench_tracking.py, docs/benchmarks.md). Set only where the
# user has not set them.
SERVER_CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": "2",
}
ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"  # MLflow's error code: another process created it first
# The userinfo of a URI (`user:password@`, `token@`): never on disk, never printed.
_USERINFO = re.compile(r"(://)[^/@\s]+@")
# A query parameter of a URI (`?token=...`, `&password=...`): its name, then its value.
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#\s?/]+)=([^&;#\s'\"]*)")
# Query parameters whose value is a secret, by name (lower case, `-` read as `_`): exact names, then endings.
SECRET_PARAMS = frozenset({"pwd", "passwd", "auth", "sig", "signature", "credential", "credentials", "apikey", "key"})
SECRET_PARAM_ENDINGS = ("token", "password", "secret", "api_key", "apikey", "access_key", "private_key")
REDACTED = "***"
# MLflow's tracking stores, by URI scheme (a database URI may name its driver: `postgresql+psycopg2://`).
SUPPORTED_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")


class StoreError(ConfigError):
    """The tracking store cannot be used; the message names `logger.tracking_uri` and the cause."""


class ServerLost(RuntimeError):
    """The tracking server stopped answering during a run; the message names the URI and the cause."""


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def bound_http_requests() -> None:
    """Bound MLflow's HTTP retries and timeouts in this process (and the processes it starts)."""
    for name, value in SERVER_CLIENT_ENV.items():
        os.environ.setdefault(name, value)


def server_lost(uri: str, err: BaseException, doing: str) -> ServerLost:
    """One line: which server, what the job was doing, the cause, and what to do."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ServerLost(
        f"{FIELD}={redact_uri(uri)}: the tracking server stopped answering while {doing} "
        f"({_short_cause(text, uri)}); the checkpoint is kept: once the server is back, re-run the same "
        "command to resume"
    )


# --- credentials ---------------------------------------------------------------------------------


def is_secret_param(name: str) -> bool:
    """Whether a URI query parameter named `name` carries a secret (`token`, `access_token`, `password`, ...)."""
    key = unquote(name).lower().replace("-", "_")
    return key in SECRET_PARAMS or key.endswith(SECRET_PARAM_ENDINGS)


def _secret_params(text: str) -> list[str]:
    return [m.group(2) for m in _QUERY_PARAM.finditer(text) if is_secret_param(m.group(2))]


def _mask_secret_params(text: str) -> str:
    def mask(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}={REDACTED}" if is_secret_param(m.group(2)) else m.group(0)

    return _QUERY_PARAM.sub(mask, text)


def redact_text(text: str) -> str:
    """`text` (a command line, a list of overrides) with every URI's `user:password@` removed and the
    values of its secret query parameters (`?token=...`) masked."""
    return _mask_secret_params(_USERINFO.sub(r"\1", text))


def redact_uri(uri: str) -> str:
    """`uri` without the user name and password (`http://user:pw@host` -> `http://host`) and with the
    values of secret query parameters masked (`?token=abc` -> `?token=***`)."""
    parts = urlsplit(uri)
    if "@" in parts.netloc:  # rebuilt only then: urlunsplit would turn sqlite://// into sqlite://
        uri = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return _mask_secret_params(uri)


def has_credentials(text: str) -> bool:
    return _USERINFO.search(text) is not None or bool(_secret_params(text))


def credentials_error(where: str) -> str:
    return (
        f"{where}: credentials in the tracking URI (`user:password@`, or a query parameter such as `?token=`, "
        "`?password=`) would be written to disk (Hydra saves the command line) and printed; remove them and set "
        f"{CREDENTIAL_ENV[0]} and {CREDENTIAL_ENV[1]} (or {CREDENTIAL_ENV[2]}) in the environment instead"
    )


def check_scheme(uri: str) -> None:
    """Refuse a tracking URI whose scheme MLflow has no store for, naming the supported ones."""
    scheme = urlsplit(uri).scheme.split("+", 1)[0].lower()
    if scheme in SUPPORTED_SCHEMES or uri == "databricks":
        return
    what = f"scheme {scheme}:// is" if scheme else "a path without a scheme is"
    raise StoreError(
        f"{FIELD}={redact_uri(uri)}: {what} not a tracking store; supported: "
        f"{', '.join(s + '://' for s in SUPPORTED_SCHEMES)} (e.g. sqlite:////abs/path/mlflow.db, http://host:5000)"
    )


def refuse_credentials(arguments: Sequence[str]) -> None:
    """Stop before Hydra starts when a command-line argument holds a URI with credentials."""
    for argument in arguments:
        if has_credentials(argument):
            raise SystemExit("config error: " + credentials_error(redact_text(argument)))


# --- retries, decided by the exception's type ----------------------------------------------------


def _causes(err: BaseException) -> Iterator[BaseException]:
    """`err` and what it wraps, however MLflow and SQLAlchemy wrapped it (`.orig`, `__cause__`, `__context__`)."""
    seen: set[int] = set()
    node: BaseException | None = err
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        yield node
        node = getattr(node, "orig", None) or node.__cause__ or node.__context__


def _is_sqlite_busy(err: BaseException) -> bool:
    """SQLite's write lock, however MLflow and SQLAlchemy wrapped it."""
    for node in _causes(err):
        if isinstance(node, sqlite3.OperationalError):
            # sqlite_errorcode exists from Python 3.11; before it every OperationalError counts.
            return getattr(node, "sqlite_errorcode", sqlite3.SQLITE_BUSY) in SQLITE_BUSY_CODES
    return False


def store_fault(err: BaseException, db: Path | None) -> str | None:
    """STORE_FULL or STORE_GONE when `err` is the SQLite store `db` failing under a run, else None.

    Decided by the exception's type and SQLite's (extended) result code or the errno, wherever MLflow
    and SQLAlchemy wrapped it: SQLITE_FULL (or a SQLite error raised over ENOSPC/EDQUOT) is a full disk;
    an ENOSPC elsewhere (a checkpoint, an artifact) is not the store's; SQLITE_READONLY_DBMOVED
    (SQLite's answer once the open file was deleted or renamed), or any SQLite error once the file is
    gone (a fresh connection makes an empty file: "no such table"), is a store that disappeared.
    """
    if db is None:
        return None
    for node in _causes(err):
        if isinstance(node, sqlite3.Error):
            code = getattr(node, "sqlite_errorcode", None)
            if code == sqlite3.SQLITE_FULL:
                return STORE_FULL
            if code == SQLITE_READONLY_DBMOVED or not db.exists() or _user_rows_lost(db):
                return STORE_GONE
            if isinstance(node.__context__, OSError) and node.__context__.errno in DISK_FULL_ERRNOS:
                return STORE_FULL  # the journal or a temporary file could not be written
    return None


def _user_rows_lost(db: Path) -> bool:
    """The file at `db` has no runs table: a new, empty file stands where the store was."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
            return not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()
    except sqlite3.Error:
        return False


def describe_store_fault(fault: str, db: Path) -> str:
    """The fault in words, for the one line a run ends with."""
    if fault == STORE_FULL:
        free = shutil.disk_usage(nearest_existing(db.parent)).free
        return f"the MLflow store's disk is full ({db.parent}: {free:,} bytes free)"
    return f"the MLflow store file {db} disappeared while the run wrote to it (deleted or moved)"


def is_transient(err: BaseException) -> bool:
    """Worth another try: SQLite's write lock, or another process creating the same thing first."""
    return _is_sqlite_busy(err) or getattr(err, "error_code", None) == ALREADY_EXISTS


def with_retry(fn: Callable[[], T], attempts: int = RETRY_ATTEMPTS, delay_s: float = RETRY_DELAY_S) -> T:
    """Call `fn`, again after a back-off while the error `is_transient` (~1 min at most)."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:
            if not is_transient(err) or attempt == attempts - 1:
                raise
            time.sleep(delay_s * (2**attempt))
    raise AssertionError("unreachable")


# --- SQLite: the file, its lock, its repair ------------------------------------------------------


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


def _check_sqlite_path(db: Path, uri: str) -> None:
    """The database must be a file, and SQLite writes it and, for its journal, the folder beside it.
    Creates nothing."""
    where = f"{FIELD}={redact_uri(uri)}"
    if db.is_dir():
        raise StoreError(f"{where}: {DB_FIELD}={db} is a directory, not a database file; point it at a file such as {db / 'mlflow.db'}")
    # The folders are made when the store is created; checked where they would be.
    problem = unwritable_reason(db.parent)
    if problem:
        raise StoreError(
            f"{where}: {problem}; SQLite writes the database {db.name} and its journal there: "
            f"point {DB_FIELD} at a writable folder"
        )
    if db.exists() and not os.access(db, os.W_OK):
        raise StoreError(f"{where}: the SQLite store {db} is read-only: point {DB_FIELD} at a writable file")


def _open_sqlite_client(uri: str, db: Path) -> MlflowClient:
    """A client whose store is open: the first query creates or upgrades the schema (hold the lock).

    A store that still cannot be opened is rebuilt when it holds no data, and refused otherwise.
    """
    from mlflow.tracking import MlflowClient  # imported late: MLflow is slow to import

    def open_client() -> MlflowClient:
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)
        return client

    _repair_half_migrated(db, uri)
    try:
        return with_retry(open_client)
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if db.exists() and _rebuild_if_empty(db, f"could not be opened ({first_line})"):
            return with_retry(open_client)
        raise StoreError(
            f"{FIELD}={redact_uri(uri)}: MLflow cannot open the SQLite store {db}: {first_line}; "
            f"{_recovery_advice(db, [])}"
        ) from err


# --- a database URI given directly ----------------------------------------------------------------

# SQLAlchemy's driver module for each database scheme MLflow accepts as a tracking URI.
DB_DRIVERS = {
    "postgresql": "psycopg2",
    "postgresql+psycopg2": "psycopg2",
    "postgresql+psycopg": "psycopg",
    "mysql": "MySQLdb",
    "mysql+pymysql": "pymysql",
    "mssql": "pyodbc",
    "mssql+pyodbc": "pyodbc",
}


def _check_driver(uri: str) -> None:
    """A database URI (`postgresql://...`) needs its driver; say which one instead of a traceback."""
    scheme = uri.split("://", 1)[0]
    module = DB_DRIVERS.get(scheme)
    if module is None or importlib.util.find_spec(module) is not None:
        return
    hint = ""
    if scheme.startswith("postgresql"):
        hint = (
            "; write postgresql+psycopg://... (the `server` extra installs psycopg: pip install -e '.[server]'), "
            "or better, point at a tracking server (make server, docs/store.md#a-team-server)"
        )
    raise StoreError(f"{FIELD}={redact_uri(uri)}: the database driver `{module}` for {scheme}:// is not installed{hint}")


# --- a tracking server ---------------------------------------------------------------------------


def _short_cause(text: str, uri: str) -> str:
    """The reason inside urllib3's nested retry message, e.g. "Connection refused"."""
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if errno:
        return errno.group(1).strip()
    if "timed out" in text.lower() or "timeout" in text.lower():
        return f"no answer within {PROBE_TIMEOUT_S:.0f} s, {PROBE_RETRIES} retries"
    return redact_text(text.replace(uri, redact_uri(uri)))[-200:]  # MLflow's message quotes the full URL


def _probe_server(uri: str) -> None:
    """One small API call with bounded retries: does an MLflow tracking server answer at `uri`?"""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    where = f"{FIELD}={redact_uri(uri)}"
    # Our own attempts, one request each: urllib3's retries count connect and read failures apart,
    # so their total time is not bounded by one number.
    for attempt in range(PROBE_RETRIES + 1):
        try:
            response = http_request(
                get_default_host_creds(uri),
                "/api/2.0/mlflow/experiments/search",
                "POST",
                json={"max_results": 1},
                max_retries=0,
                timeout=PROBE_TIMEOUT_S,
                raise_on_status=False,
            )
            break
        except Exception as err:  # connection refused, DNS, TLS, a timeout
            if attempt == PROBE_RETRIES:
                raise StoreError(
                    f"{where}: no MLflow tracking server answers there ({_short_cause(str(err), uri)}); start it "
                    "(`mlflow server --backend-store-uri ...`), fix the address, or drop the override to track "
                    "in the local SQLite store"
                ) from err
            time.sleep(PROBE_BACKOFF_S * 2**attempt)
    if response.status_code in (401, 403):
        raise StoreError(
            f"{where}: the tracking server refused the credentials (HTTP {response.status_code}); "
            f"set {CREDENTIAL_ENV[0]} and {CREDENTIAL_ENV[1]} (or {CREDENTIAL_ENV[2]})"
        )
    if response.status_code != 200:
        raise StoreError(
            f"{where}: a server answers there, but not as an MLflow tracking server "
            f"(HTTP {response.status_code} from /api/2.0/mlflow/experiments/search)"
        )


# --- the door ------------------------------------------------------------------------------------


class Store:
    """One MLflow store, checked once (`connect`) and opened once (the first use of `client`).

    The methods are what the project reads and writes; each write rides out SQLite's write lock.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.db = sqlite_path(uri)
        self._client: MlflowClient | None = None
        self._experiments: dict[str, str] = {}

    @classmethod
    def connect(cls, uri: str) -> Store:
        """Check the store in the first seconds (see the module's docstring); raises `StoreError`."""
        where = f"{FIELD}={redact_uri(uri)}"
        if has_credentials(uri):
            raise StoreError(credentials_error(where))
        check_scheme(uri)
        store = cls(uri)
        if store.db is not None:
            _check_sqlite_path(store.db, uri)
            if store.db.exists():
                store.client  # noqa: B018 - open it now: upgrade, repair or refuse before any data is prepared
        elif is_server(uri):
            _probe_server(uri)
            bound_http_requests()
        else:
            _check_driver(uri)
        return store

    @property
    def client(self) -> MlflowClient:
        """The store's client; a SQLite store is created or upgraded under its lock on first use."""
        if self._client is None:
            if self.db is not None:
                self.db.parent.mkdir(parents=True, exist_ok=True)
                with store_lock(self.db):
                    self._client = _open_sqlite_client(self.uri, self.db)
            else:
                from mlflow.tracking import MlflowClient

                self._client = MlflowClient(self.uri)
        return self._client

    def __repr__(self) -> str:
        return f"Store({redact_uri(self.uri)!r})"

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
                found = with_retry(get_or_create)
        else:  # a server: the second creator gets RESOURCE_ALREADY_EXISTS, and its retry finds it
            found = with_retry(get_or_create)
        self._experiments[name] = found
        return found

    def find_experiment(self, name: str) -> Experiment | None:
        """The live experiment `name`, or None."""
        found = self.client.get_experiment_by_name(name)
        return None if found is None or found.lifecycle_stage == "deleted" else found

    def experiments(self) -> list[Experiment]:
        """The store's live experiments."""
        return list(self.client.search_experiments())

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        return dict(self.client.get_experiment(experiment_id).tags)

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        with_retry(lambda: self.client.set_experiment_tag(experiment_id, key, value))

    def delete_experiment_tag(self, experiment_id: str, key: str) -> None:
        with_retry(lambda: self.client.delete_experiment_tag(experiment_id, key))

    def experiment_names(self) -> list[str]:
        return sorted(e.name for e in self.client.search_experiments())

    # --- reading runs ---

    def get_run(self, run_id: str) -> Run | None:
        """The run, or None when the store has no such run."""
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id)
        except MlflowException:
            return None

    def runs(
        self, experiment_id: str, filter_string: str = "", order_by: Sequence[str] = (), most: int | None = None
    ) -> list[Run]:
        """The experiment's live runs matching `filter_string`, every page (or the first `most`)."""
        from mlflow.entities import ViewType

        runs: list[Run] = []
        token = None
        while True:
            page = self.client.search_runs(
                [experiment_id],
                filter_string=filter_string,
                run_view_type=ViewType.ACTIVE_ONLY,
                order_by=list(order_by) or None,
                max_results=min(most - len(runs), 1000) if most else 1000,
                page_token=token,
            )
            runs.extend(page)
            token = page.token
            if not token or (most and len(runs) >= most):
                return runs

    def runs_tagged(self, experiment_id: str, tag: str, value: str, most: int | None = None) -> list[Run]:
        """The experiment's live runs with `tag` = `value`, latest first."""
        return self.runs(experiment_id, f"tags.`{tag}` = '{value}'", ["attributes.start_time DESC"], most)

    def metric_history(self, run_id: str, key: str) -> list[Metric]:
        return self.client.get_metric_history(run_id, key)

    def read_text(self, run_id: str, artifact_path: str) -> str:
        """A small text artifact of the run."""
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one small file: no bar
        with tempfile.TemporaryDirectory() as tmp:
            return Path(self.client.download_artifacts(run_id, artifact_path, tmp)).read_text()

    # --- writing runs ---

    def create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> str:
        return with_retry(lambda: self.client.create_run(experiment_id, run_name=run_name, tags=dict(tags))).info.run_id

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            with_retry(lambda k=key, v=value: self.client.set_tag(run_id, k, v))

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Params, once each (MLflow params are immutable), in batches of MLflow's limit."""
        from mlflow.entities import Param

        items = [Param(key, str(value)[:PARAM_VALUE_MAX]) for key, value in params.items()]
        for i in range(0, len(items), BATCH_MAX):
            with_retry(lambda chunk=items[i : i + BATCH_MAX]: self.client.log_batch(run_id, params=chunk))

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(value), now, step) for key, value in metrics.items()]
        for i in range(0, len(items), BATCH_MAX):
            with_retry(lambda chunk=items[i : i + BATCH_MAX]: self.client.log_batch(run_id, metrics=chunk))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        with_retry(lambda: self.client.log_text(run_id, text, artifact_file))

    def log_files(self, run_id: str, paths: Iterable[Path], folder: str | None = None) -> None:
        for path in paths:
            with_retry(lambda p=path: self.client.log_artifact(run_id, str(p), folder))

    def reopen(self, run_id: str) -> None:
        """Mark a closed run RUNNING again (a resumed job, a re-run sweep)."""
        with_retry(lambda: self.client.update_run(run_id, status="RUNNING"))

    def terminate(self, run_id: str, status: str) -> None:
        """Close the run: FINISHED, FAILED or KILLED."""
        with_retry(lambda: self.client.set_terminated(run_id, status))

    # --- tables, dataset inputs ---

    def log_table(self, run_id: str, data: pd.DataFrame, artifact_file: str) -> None:
        """A table artifact (`*.json`) that MLflow's artifact viewer shows as a grid."""
        with_retry(lambda: self.client.log_table(run_id, data=data, artifact_file=artifact_file))

    def log_inputs(self, run_id: str, datasets: Sequence[DatasetInput]) -> None:
        """Dataset inputs of the run (the UI's Datasets column)."""
        with_retry(lambda: self.client.log_inputs(run_id, datasets=list(datasets)))
