"""Files replaced atomically: a reader sees the old file or the complete new one, never half of it.

The new content goes to a temporary file in the target's own folder (a rename within one filesystem
is atomic, while a move across filesystems is a copy in place), is flushed and fsynced, then renamed
over the target; the folder is fsynced last, so that the rename itself survives a power cut. Any
failure removes the temporary file and leaves the target as it was. The one writer of the token
cache (src.data.cache) and of checkpoints (`write_checkpoint`, which Lightning's checkpoint writer in
src.training.trainer calls), and the one mover of a file kept aside (`move_aside`: a replaced run's
checkpoint). Nothing here imports torch.

Lightning's own writer stages a checkpoint in the system's temporary folder and moves it over
`last.ckpt`; across filesystems that move is a copy *in place*, so a disk that fills during the copy
left a broken `last.ckpt` and the run's previous good state was gone. Written here, any failure
leaves the previous checkpoint as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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
