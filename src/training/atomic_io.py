"""Checkpoints written atomically on their own filesystem.

Lightning's writer stages a checkpoint in the system's temporary folder and moves it over
`last.ckpt`; across filesystems that move is a copy *in place*, so a disk that fills during the
copy leaves a broken `last.ckpt` and the run's previous good state is gone. Here the new state is
written by `src.atomic_io` (a temporary file in the checkpoint's own folder, fsynced, then renamed
over the old one): any failure leaves the previous checkpoint as it was.
"""

from __future__ import annotations

import errno
import io
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from src.atomic_io import atomic_write


class CheckpointSpaceError(RuntimeError):
    """The checkpoint's filesystem has no room for the new checkpoint (the previous one is intact)."""


def write_checkpoint(path: Path, data: bytes | memoryview) -> None:
    """Replace the checkpoint at `path` with `data` atomically (src.atomic_io); a full disk is a
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


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, with `write_checkpoint` for local paths."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # remote storage: Lightning's own transaction
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        buffer = io.BytesIO()  # serialized first: its size is what the disk must hold
        torch.save(checkpoint, buffer)
        write_checkpoint(Path(path), buffer.getbuffer())
