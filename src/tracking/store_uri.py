"""A tracking URI's form: which kind of store it names, and the error every store check raises.

Checked before anything is opened: a scheme MLflow has no store for, a database URI whose driver is
not installed. Torch-free and MLflow-free.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import urlsplit

from src.core.paths import ConfigError
from src.tracking.credentials import redact_uri

FIELD = "logger.tracking_uri"
DB_FIELD = "paths.mlflow_db"
# MLflow's tracking stores, by URI scheme (a database URI may name its driver: `postgresql+psycopg2://`).
SUPPORTED_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")


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


def check_driver(uri: str) -> None:
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
