"""A full disk during a checkpoint write: the previous checkpoint survives, the run fails in one
line naming the folder and the bytes, and `resume=true` continues from the last good state.

The disk is a real small tmpfs where this machine lets us mount one (root); elsewhere the write's
fsync reports ENOSPC, as a full disk does.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from mlflow.tracking import MlflowClient

import src.training.run_life as run_life_module
from src.core.atomic_io import CheckpointSpaceError, write_checkpoint
from src.core.paths import compose
from src.train import train

STEPS = 8
MiB = 2**20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path | None]:
    """A 128 MiB tmpfs (room for two tiny checkpoints) (None where mounting is not allowed)."""
    mnt = tmp_path / "small_disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", str(mnt)], capture_output=True).returncode == 0
    yield mnt if mounted else None
    if mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """Another writer takes all but `leave` bytes of the folder's filesystem."""
    filler = folder / "filler.bin"
    size = shutil.disk_usage(folder).free - leave
    with open(filler, "wb") as f:
        f.truncate(0)
        chunk = b"\0" * MiB
        while size > 0:  # written, not sparse: tmpfs counts only written pages
            f.write(chunk[: min(size, MiB)])
            size -= MiB
    return filler


def test_failed_write_keeps_the_previous_file(small_disk: Path | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if small_disk is None:
        pytest.skip("mounting a tmpfs needs root; the training test below injects ENOSPC instead")
    target = small_disk / "ckpt" / "last.ckpt"
    write_checkpoint(target, b"good" * 1000)
    _fill(small_disk, leave=MiB)
    with pytest.raises(CheckpointSpaceError) as err:
        write_checkpoint(target, b"x" * (4 * MiB))
    message = str(err.value)
    assert "\n" not in message and str(target.parent) in message and "4,194,304 bytes" in message
    assert target.read_bytes() == b"good" * 1000
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]  # no partial file left behind

    # Lightning's own writer, for contrast: it stages elsewhere and copies over last.ckpt in place.
    (small_disk / "filler.bin").unlink()
    TorchCheckpointIO().save_checkpoint({"w": torch.zeros(10)}, target)
    _fill(small_disk, leave=MiB)
    with pytest.raises(OSError):
        TorchCheckpointIO().save_checkpoint({"w": torch.zeros(MiB)}, target)
    with pytest.raises(Exception):  # noqa: B017 - any failure to read: the previous state is gone
        torch.load(target, weights_only=True)


class FillDiskAt(L.Callback):
    """At the end of step `step` another writer fills the checkpoint's disk (after step 2's checkpoint)."""

    def __init__(self, step: int, folder: Path, monkeypatch: pytest.MonkeyPatch, real_disk: bool) -> None:
        self.step, self.folder, self.monkeypatch, self.real_disk = step, folder, monkeypatch, real_disk

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step != self.step:
            return
        if self.real_disk:
            _fill(self.folder.parent, leave=(self.folder / "last.ckpt").stat().st_size // 2)
        else:
            def full(fd: int) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            self.monkeypatch.setattr(os, "fsync", full)


@pytest.mark.slow
def test_disk_full_during_checkpoint_then_resume(
    small_disk: Path | None, tiny_overrides: list[str], store: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = (small_disk or tmp_path) / "ckpt"
    overrides = [
        *tiny_overrides, f"optim.max_steps={STEPS}", "checkpoint.enabled=true", "checkpoint.every_n_steps=2",
        f"checkpoint.dir={folder}", "experiment_name=disk_full",
    ]
    fault = FillDiskAt(3, folder, monkeypatch, real_disk=small_disk is not None)

    class WithFault(run_life_module.RunCallbacks):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.extra.append(fault)

    with monkeypatch.context() as m:
        m.setattr(run_life_module, "RunCallbacks", WithFault)
        with pytest.raises(CheckpointSpaceError) as err:
            train(compose(overrides))
    message = str(err.value)
    assert "\n" not in message and str(folder) in message and "bytes" in message
    client = MlflowClient(store["uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("disk_full").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["outcome"] == "failed"
    assert torch.load(folder / "last.ckpt", weights_only=True, mmap=True)["global_step"] == 2  # intact

    monkeypatch.undo()  # the disk is freed
    (folder.parent / "filler.bin").unlink(missing_ok=True)
    resumed = train(compose([*overrides, "resume=true"]))
    assert resumed.run_id == run.info.run_id
    after = client.get_run(run.info.run_id)
    assert after.info.status == "FINISHED" and "test_loss" in after.data.metrics
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/train_loss")]
    assert sorted(steps) == list(range(1, STEPS + 1))
