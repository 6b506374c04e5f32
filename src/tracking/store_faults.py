"""What a SQLite store failing under a run means: a full disk, or a store file that disappeared.

A run that ends on such an error says so in one line (src.training.failures words it) instead of
MLflow's tracebacks. Torch-free and MLflow-free.
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
from pathlib import Path

from src.tracking.retry import causes

# SQLite's extended code once the open database file was unlinked or renamed (named in Python >= 3.11).
SQLITE_READONLY_DBMOVED = getattr(sqlite3, "SQLITE_READONLY_DBMOVED", 1032)
DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
STORE_FULL, STORE_GONE = "full", "gone"  # what store_fault finds


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
    for node in causes(err):
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
