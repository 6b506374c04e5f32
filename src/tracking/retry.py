"""Retries decided by the exception's type (or, from a server, its text): the one retry loop of the tracking code.

`with_retry` rides out what passes by itself: SQLite's write lock (however MLflow and SQLAlchemy
wrapped it), or another process creating the same thing first. `retry` is the loop beneath it, with
the caller's test of what is worth another try (the server probe retries every failure a few times).
Torch-free and MLflow-free.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

RETRY_ATTEMPTS = 8  # with 0.25 s doubling: ~1 min on top of SQLite's own busy timeout
RETRY_DELAY_S = 0.25
SQLITE_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"  # MLflow's error code: another process created it first


def causes(err: BaseException) -> Iterator[BaseException]:
    """`err` and what it wraps, however MLflow and SQLAlchemy wrapped it (`.orig`, `__cause__`, `__context__`)."""
    seen: set[int] = set()
    node: BaseException | None = err
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        yield node
        node = getattr(node, "orig", None) or node.__cause__ or node.__context__


def is_sqlite_busy(err: BaseException) -> bool:
    """SQLite's write lock, however MLflow and SQLAlchemy wrapped it."""
    for node in causes(err):
        if isinstance(node, sqlite3.OperationalError):
            # sqlite_errorcode exists from Python 3.11; before it every OperationalError counts.
            return getattr(node, "sqlite_errorcode", sqlite3.SQLITE_BUSY) in SQLITE_BUSY_CODES
    return False


# How a server-side unique violation reads once it crossed HTTP: MLflow's server answers with the
# database error's text (`BAD_REQUEST: (psycopg.errors.UniqueViolation) duplicate key value violates
# unique constraint "dataset_pk"`), and the client raises a RestException carrying only that text.
UNIQUE_VIOLATION_TEXTS = (
    "UniqueViolation",  # psycopg's exception class, named in SQLAlchemy's message
    "duplicate key value violates unique constraint",  # PostgreSQL
    "UNIQUE constraint failed",  # SQLite behind a server
    "Duplicate entry",  # MySQL (error 1062)
)


def is_reported_unique_violation(err: BaseException) -> bool:
    """A tracking server's answer (MLflow's RestException: its `error_code` and text are all that
    arrive) that says the database refused a duplicate row."""
    return type(err).__name__ == "RestException" and any(text in str(err) for text in UNIQUE_VIOLATION_TEXTS)


def is_duplicate_insert(err: BaseException) -> bool:
    """A row another process inserted first, between MLflow's check for it and its own insert (two
    runs starting at once log the same dataset): the next try finds the row and links to it. Told by
    the exception's type in this process (a database store), by its text from a server."""
    return any(
        isinstance(node, sqlite3.IntegrityError) or type(node).__name__ == "UniqueViolation" or is_reported_unique_violation(node)
        for node in causes(err)
    )


def is_transient(err: BaseException) -> bool:
    """Worth another try: SQLite's write lock, or another process creating the same thing first."""
    return is_sqlite_busy(err) or getattr(err, "error_code", None) == ALREADY_EXISTS or is_duplicate_insert(err)


def retry(
    fn: Callable[[], T], attempts: int, delay_s: float, worth_retrying: Callable[[Exception], bool], growth: float = 2.0
) -> T:
    """Call `fn` up to `attempts` times, `delay_s` growing `growth`-fold between them (doubling; 1: a
    steady poll), while its error is `worth_retrying`; the last error (or the first one not worth
    retrying) is raised as it is."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:
            if attempt == attempts - 1 or not worth_retrying(err):
                raise
            time.sleep(delay_s * growth**attempt)
    raise ValueError(f"attempts must be >= 1, got {attempts}")


def with_retry(fn: Callable[[], T], attempts: int = RETRY_ATTEMPTS, delay_s: float = RETRY_DELAY_S) -> T:
    """Call `fn`, again after a back-off while the error `is_transient` (~1 min at most)."""
    return retry(fn, attempts, delay_s, is_transient)
