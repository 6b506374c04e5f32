"""Checkpoints written atomically on their own filesystem.

Lightning's writer stages a checkpoint in the system's temporary folder and moves it over
`last.ckpt`; across filesystems that move is a copy *in place*, so a disk that fills during the
copy leaves a broken `last.ckpt` and the run's previous good state is gone. Here the new state is
written to a temporary file in the checkpoint's own folder, flushed and fsynced, then renamed over
the old one (a rename within one filesystem is atomic): any failure leaves the previous checkpoint
as it was.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


class CheckpointSpaceError(RuntimeError):
    """The checkpoint's filesystem has no room for the new checkpoint (the previous one is intact)."""


def partial_name_glob(path: Path) -> str:
    """The names of `atomic_write`'s temporary files for `path` (one is left when a SIGKILL cuts a write short)."""
    return f".{path.name}.*.partial"


def remove_partial_writes(path: Path) -> list[Path]:
    """Delete the temporary files of writes of `path` that never finished; only safe while no other
    process writes `path` (a run calls it once it knows it alone trains into the folder)."""
    found = sorted(path.parent.glob(partial_name_glob(path))) if path.parent.is_dir() else []
    for tmp in found:
        tmp.unlink(missing_ok=True)
    return found


def atomic_write(path: Path, data: bytes | memoryview) -> None:
    """Write `data` to `path` so that a reader sees either the old file or the complete new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(path.parent).free
            raise CheckpointSpaceError(
                f"checkpoint: no space left in {path.parent} for {path.name}: it needs {len(data):,} bytes, "
                f"{free:,} are free; the previous checkpoint there is intact (free space, then resume=true)"
            ) from None
        raise
    # The rename itself is durable once the folder's entry is on disk.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, with `atomic_write` for local paths."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # remote storage: Lightning's own transaction
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        buffer = io.BytesIO()  # serialized first: its size is what the disk must hold
        torch.save(checkpoint, buffer)
        atomic_write(Path(path), buffer.getbuffer())
