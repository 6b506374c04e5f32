"""The tracking URI, read before anything is opened: which store it names, the secrets it must not
carry, and the error every store check raises.

`check_uri` gives a URI every check it gets by itself, in one pass, before `Store.connect` opens or
asks anything: credentials in it are refused, and so is a scheme MLflow has no store for, a SQLite
database path that is a folder, read-only or in a folder SQLite cannot write, and a database URI
whose driver is not installed.

Credentials never on disk, never printed: Hydra writes the command line to disk before any code of
ours runs, and MLflow prints the URI; so a URI with `user:password@` or a secret query parameter
(`?token=...`) is refused (`refuse_credentials` before Hydra starts, then `check_uri`), and every
URI a message shows goes through `redact_uri`. MLflow reads credentials from the environment
(CREDENTIAL_ENV) instead. Torch-free and MLflow-free.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from src.core.paths import ConfigError, unwritable_reason

FIELD = "logger.tracking_uri"
DB_FIELD = "paths.mlflow_db"
# MLflow's tracking stores, by URI scheme (a database URI may name its driver: `postgresql+psycopg2://`).
SUPPORTED_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
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


class StoreError(ConfigError):
    """The tracking store cannot be used; the message names `logger.tracking_uri` and the cause."""


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///...` URI; None for other stores and in-memory SQLite."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    path = tracking_uri.removeprefix("sqlite:///").split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


# --- secrets: found, refused, masked ---------------------------------------------------------------

CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
# The userinfo of a URI (`user:password@`, `token@`): never on disk, never printed.
_USERINFO = re.compile(r"(://)[^/@\s]+@")
# A query parameter of a URI (`?token=...`, `&password=...`): its name, then its value.
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#\s?/]+)=([^&;#\s'\"]*)")
# Query parameters whose value is a secret, by name (lower case): any name holding one of these parts
# (`X-Auth`, `access_token`, `api-key`, `Signature`, ...), or one of the short names that hold none.
# Matching parts rather than a list of known names errs towards masking: a proxy's own header-like
# names (`X-Auth`) are not on any list, and a plain parameter that happens to match (`?tokens_seen=`)
# costs only its value in a printed line, where a leaked secret costs the credential.
SECRET_PARAM_PARTS = ("auth", "key", "token", "secret", "password", "signature", "credential")
SECRET_PARAMS = frozenset({"pwd", "passwd", "sig"})
REDACTED = "***"


def is_secret_param(name: str) -> bool:
    """Whether a URI query parameter named `name` carries a secret (`token`, `X-Auth`, `password`, ...)."""
    key = unquote(name).lower()
    return key in SECRET_PARAMS or any(part in key for part in SECRET_PARAM_PARTS)


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


def refuse_credentials(arguments: Sequence[str]) -> None:
    """Stop before Hydra starts when a command-line argument holds a URI with credentials."""
    for argument in arguments:
        if has_credentials(argument):
            raise SystemExit("config error: " + credentials_error(redact_text(argument)))


# --- the checks ------------------------------------------------------------------------------------


def check_uri(uri: str) -> None:
    """Every check the URI gets by itself, in this order (the first that fails is the one reported);
    raises `StoreError`. Opens nothing, creates nothing."""
    check_uri_text(uri)
    where = f"{FIELD}={redact_uri(uri)}"  # as every message shows the URI
    if is_server(uri):
        return  # a server is checked by asking it (src.tracking.server_client)
    db = sqlite_path(uri)
    if db is None:
        _check_driver(uri, where)  # a database URI (any other store names no driver)
    else:
        _check_sqlite_path(db, where)


def check_uri_text(uri: str) -> None:
    """The checks of the URI's text alone (no credentials, a scheme MLflow has a store for): the
    config's checks run them before torch, Lightning or MLflow is imported; raises `StoreError`."""
    where = f"{FIELD}={redact_uri(uri)}"
    if has_credentials(uri):
        raise StoreError(credentials_error(where))
    _check_scheme(uri, where)


def _check_scheme(uri: str, where: str) -> None:
    """Refuse a tracking URI whose scheme MLflow has no store for, naming the supported ones."""
    scheme = urlsplit(uri).scheme.split("+", 1)[0].lower()
    if scheme in SUPPORTED_SCHEMES or uri == "databricks":
        return
    what = f"scheme {scheme}:// is" if scheme else "a path without a scheme is"
    raise StoreError(
        f"{where}: {what} not a tracking store; supported: "
        f"{', '.join(s + '://' for s in SUPPORTED_SCHEMES)} (e.g. sqlite:////abs/path/mlflow.db, http://host:5000)"
    )


def _check_sqlite_path(db: Path, where: str) -> None:
    """The database must be a file, and SQLite writes it and, for its journal, the folder beside it."""
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


def _check_driver(uri: str, where: str) -> None:
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
    raise StoreError(f"{where}: the database driver `{module}` for {scheme}:// is not installed{hint}")
