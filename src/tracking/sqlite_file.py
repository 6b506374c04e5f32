"""The SQLite store's file: repaired when a migration was cut short (its path is checked before, with
the rest of the URI: src.tracking.store_uri.check_uri; the lock held while its schema changes is the
store's, `src.tracking.store.store_lock`).

A new SQLite store gets its schema from MLflow's alembic migrations the first time a process opens
it. Processes opening a fresh file at the same moment race in those migrations and can leave it
half-migrated (leftover `_alembic_tmp_*` tables) so that every later open fails; retrying cannot
fix that. So every process takes an exclusive lock file beside the database (`mlflow.db.lock`,
`src.tracking.store.store_lock`) while the schema is created or upgraded and while an experiment is found or created;
afterwards parallel writers only meet SQLite's ordinary write lock, which SQLite's busy timeout
(MLflow sets 20 s) and `src.tracking.retry.with_retry` ride out. A half-migrated store is rebuilt
when it provably holds no user data, and refused otherwise, with the steps to recover it.
Torch-free and MLflow-free.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path

from src.tracking.store_uri import FIELD, StoreError, redact_uri

log = logging.getLogger(__name__)

TMP_TABLE_PREFIX = "_alembic_tmp_"  # alembic's copy of a table being rebuilt on SQLite
# Tables MLflow fills in every new store; rows there are not user data.
STORE_METADATA_TABLES = {"alembic_version", "workspaces"}
DEFAULT_EXPERIMENT_ID = 0


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


def rebuild_if_empty(db: Path, why: str) -> bool:
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


def recovery_advice(db: Path, leftovers: list[str]) -> str:
    steps = [f"back it up (cp {db} {db}.bak)"]
    if leftovers:
        drops = " ".join(f"DROP TABLE {t};" for t in leftovers)
        steps.append(f"for each leftover _alembic_tmp_X whose table X still exists, drop it (sqlite3 {db} '{drops}')")
    steps.append(f"run `mlflow db upgrade sqlite:///{db}`")
    return (
        f"to recover: {'; '.join(steps)}. If that fails, keep the backup and train into a new store "
        "(paths.mlflow_db=<new file>)"
    )


def repair_half_migrated(db: Path, uri: str) -> None:
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
    if data or not rebuild_if_empty(db, why):
        held = ", ".join(f"{t}: {'?' if n < 0 else n} rows" for t, n in sorted(data.items()))
        raise StoreError(
            f"{FIELD}={redact_uri(uri)}: the SQLite store {db} {why} and holds data ({held}), "
            f"so it is not rebuilt automatically; {recovery_advice(db, leftovers)}"
        )

