"""The Lightning DataModule: token cache in, window batches out.

`prepare_data` (Lightning runs it on one process per node) builds the token cache if needed;
`setup` (every process) memory-maps the splits. Training batches come from `RandomWindows`,
which are already in random order, so the loader does not shuffle; under DDP Lightning wraps it
in a `DistributedSampler` and the global batches match a single-process run (see windows.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from .cache import SPLITS, cache_folder, load_split
from .sources import DataSource, build_source
from .windows import FixedWindows, RandomWindows


class TokenDataModule(L.LightningDataModule):
    """Random training windows and fixed val/test windows over a `DataSource`'s cached tokens."""

    def __init__(
        self,
        source: DataSource,
        cache_dir: str | Path,
        context_length: int,
        micro_batch_size: int,
        train_samples: int,
        seed: int,
        val_max_windows: int | None = None,
        test_max_windows: int | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.source = source
        self.cache_dir = Path(cache_dir)
        self.context_length = context_length
        self.micro_batch_size = micro_batch_size
        self.train_samples = train_samples
        self.seed = seed
        self.val_max_windows = val_max_windows
        self.test_max_windows = test_max_windows
        self.num_workers = num_workers
        self.tokens: dict[str, np.ndarray] = {}

    @property
    def folder(self) -> Path:
        """The cache folder holding this source's token files."""
        return cache_folder(self.cache_dir, self.source.cache_key)

    @property
    def num_tokens(self) -> dict[str, int]:
        """Tokens per split (after `setup`)."""
        return {split: len(tokens) for split, tokens in self.tokens.items()}

    def prepare_data(self) -> None:
        self.source.prepare(self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.tokens:
            return  # Lightning calls setup once per stage; the memmaps serve them all
        tokens = {split: load_split(self.folder, split) for split in SPLITS}
        for split, array in tokens.items():
            if len(array) < self.context_length + 1:
                raise ValueError(
                    f"split '{split}' has {len(array)} tokens, fewer than context_length + 1 = "
                    f"{self.context_length + 1}; use a shorter context or more {split} data"
                )
        self.tokens = tokens

    def _loader(self, dataset: RandomWindows | FixedWindows) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.micro_batch_size,
            shuffle=False,  # windows are random (train) or fixed on purpose (val / test)
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(
            RandomWindows(self.tokens["train"], self.context_length, self.train_samples, self.seed)
        )

    def val_dataloader(self) -> DataLoader:
        return self._loader(FixedWindows(self.tokens["val"], self.context_length, self.val_max_windows))

    def test_dataloader(self) -> DataLoader:
        return self._loader(FixedWindows(self.tokens["test"], self.context_length, self.test_max_windows))


def build_datamodule(
    data_cfg: Mapping[str, Any],
    *,
    context_length: int,
    micro_batch_size: int,
    train_samples: int,
    seed: int,
) -> TokenDataModule:
    """A `TokenDataModule` from a `data/` config group (source, cache_dir and loader fields)."""
    if data_cfg.get("cache_dir") is None:
        raise ValueError("data.cache_dir is required (the folder that holds token caches)")
    return TokenDataModule(
        source=build_source(data_cfg),
        cache_dir=data_cfg["cache_dir"],
        context_length=context_length,
        micro_batch_size=micro_batch_size,
        train_samples=train_samples,
        seed=seed,
        val_max_windows=data_cfg.get("val_max_windows"),
        test_max_windows=data_cfg.get("test_max_windows"),
        num_workers=int(data_cfg.get("num_workers", 0)),
    )
