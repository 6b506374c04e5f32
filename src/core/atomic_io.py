"""Files replaced atomically: a reader sees the old file or the complete new one, never half of it.

The new content goes to a temporary file in the target's own folder (a rename within one filesystem
is atomic, while a move across filesystems is a copy in place), is flushed and fsynced, then renamed
over the target; the folder is fsynced last, so that the rename itself survives a power cut. Any
failure removes the temporary file and leaves the target as it was. The one writer of the token
cache (src.data.cache) and of checkpoints (`write_checkpoint`, which Lightning's checkpoint writer in
src.training.run_life calls), and the one mover of a file kept aside (`move_aside`: a replaced run's
checkpoint). Nothing here imports torch.

The project's inter-process file locks live here too (`exclusive`, `try_hold`, through `filelock`):
three places need one process at a time: the MLflow store's first open (schema creation races), the
FineWeb token cache (one preparer per folder) and the worker slots of a pool (one worker per slot for
the life of its process). A lock file is never deleted: removing it while another process waits on it
would let a third one in.

Lightning's own writer stages a checkpoint in the system's temporary folder and moves it over
`last.ckpt`; across filesystems that move is a copy *in place*, so a disk that fills during the copy
left a broken `last.ckpt` and the run's previous good state was gone. Written here, any failure
leaves the previous checkpoint as it was.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

TEMP_GLOB = ".*.tmp"  # what `temp_path` names: a killed writer's leftovers, found by this pattern


def temp_path(target: Path) -> Path:
    # Unique per process and call, hidden, in the target's folder, never matching the target's name.
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def fsync_folder(folder: Path) -> None:
    """Make the folder's entries (a rename into it) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[BinaryIO]:
    """A binary file to write `target`'s new content to; on a clean exit it replaces `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(target)
    try:
        # O_EXCL: a fresh file of our own; mode 0o666 less the umask, like any file this process makes.
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(target.parent)


def atomic_write(target: Path, data: bytes | memoryview) -> None:
    """Write `data` to `target` atomically (see the module's docstring)."""
    with atomic_file(target) as f:
        f.write(data)


def move_aside(path: Path, to: Path) -> None:
    """Move `path` to `to` (a folder beside it: the same filesystem, so one atomic rename), durably."""
    to.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, to)
    fsync_folder(to.parent)
    fsync_folder(path.parent)


def remove_partial_writes(target: Path) -> list[Path]:
    """Delete the temporary files of writes of `target` that never finished (a SIGKILL mid-write);
    only safe while no other process writes `target` (a run calls it once it alone trains into the folder)."""
    found = sorted(target.parent.glob(f".{target.name}.*.tmp")) if target.parent.is_dir() else []
    for tmp in found:
        tmp.unlink(missing_ok=True)
    return found


class CheckpointSpaceError(RuntimeError):
    """The checkpoint's filesystem has no room for the new checkpoint (the previous one is intact)."""


def write_checkpoint(path: Path, data: bytes | memoryview) -> None:
    """Replace the checkpoint at `path` with `data` atomically; a full disk is a
    `CheckpointSpaceError` naming the folder and the bytes."""
    try:
        atomic_write(path, data)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        free = shutil.disk_usage(path.parent).free
        raise CheckpointSpaceError(
            f"checkpoint: no space left in {path.parent} for {path.name}: it needs {len(data):,} bytes, "
            f"{free:,} are free; the previous checkpoint there is intact (free space, then resume=true)"
        ) from None


# --- locks: one process at a time
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
