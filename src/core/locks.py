"""Inter-process file locks, one implementation for the whole project (through `filelock`).

Three places need one process at a time: the MLflow store's first open (schema creation races),
the FineWeb token cache (one preparer per folder) and the worker slots of a pool (one worker per
slot for the life of its process). The lock file is never deleted: removing it while another
process waits on it would let a third one in. Torch-free.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

POLL_S = 0.05
WAIT_NOTICE_S = 2.0  # a waiter longer than this says whom it waits for (a schema upgrade, or a stuck process)


class LockTimeout(TimeoutError):
    """The lock stayed held for the whole wait; the message names the lock file."""


def file_lock(path: Path) -> FileLock:
    # thread_local=False: a lock held by one thread (a Hydra callback) is the process's lock.
    return FileLock(path, thread_local=False, poll_interval=POLL_S)


@contextlib.contextmanager
def exclusive(path: Path, wait_s: float | None = None, what: str = "") -> Iterator[None]:
    """Hold the exclusive lock file `path` (waiting at most `wait_s` seconds; None: forever)."""
    lock = file_lock(path)
    try:
        lock.acquire(timeout=WAIT_NOTICE_S if wait_s is None or wait_s > WAIT_NOTICE_S else wait_s)
    except Timeout:
        log.info("waiting for %s%s", path, f": another process is {what}" if what else "")
        try:
            lock.acquire(timeout=-1 if wait_s is None else max(wait_s - WAIT_NOTICE_S, 0.0))
        except Timeout:
            raise LockTimeout(f"waited {wait_s:g} s for {path}, held by another process") from None
    try:
        yield
    finally:
        lock.release()


def try_hold(path: Path) -> FileLock | None:
    """Take `path` without waiting and keep it until the returned lock is released or the process
    exits; None when another process holds it."""
    lock = file_lock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock
