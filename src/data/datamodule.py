"""The Lightning DataModule: token cache in, window batches out.

`prepare_data` (Lightning runs it on one process per node) builds the token cache if needed;
`setup` (every process) memory-maps the splits. Training batches come from `RandomWindows`,
which are already in random order, so the loader does not shuffle; `ResumableRankSampler` gives
each rank its share (the global batches match a single-process run) and resumes mid-run
(see windows.py). The Trainer runs with `use_distributed_sampler=False` so Lightning keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Sampler

from .cache import cache_folder, load_split
from .sources import DataSource, build_source
from .windows import FixedWindows, RandomWindows, ResumableRankSampler, TokenArray


class TokenDataModule(L.LightningDataModule):
    """Random training windows and fixed val/test windows over a `DataSource`'s cached tokens.

    The test windows may come from another split at an offset: FineWeb has only train and val,
    and the study scores a fixed window deep inside val, past the windows validation uses.
    """

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
        test_split: str = "test",
        test_offset: int = 0,
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
        self.test_split = test_split
        self.test_offset = test_offset
        self.tokens: dict[str, TokenArray] = {}

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
        tokens = {split: load_split(self.folder, split) for split in ("train", "val", self.test_split)}
        for split, array in tokens.items():
            if len(array) < self.context_length + 1:
                raise ValueError(
                    f"split '{split}' has {len(array)} tokens, fewer than context_length + 1 = "
                    f"{self.context_length + 1}; use a shorter context or more {split} data"
                )
        self._check_test_window(len(tokens[self.test_split]))
        self.tokens = tokens

    def _check_test_window(self, split_tokens: int) -> None:
        if self.test_offset < 0 or self.test_offset + self.context_length + 1 > split_tokens:
            raise ValueError(
                f"data.test_offset={self.test_offset} leaves no test window in split '{self.test_split}' "
                f"({split_tokens} tokens, context_length={self.context_length})"
            )
        # Scored once at the end, the test tokens must not be among those validated on during training.
        if self.test_split == "val":
            val_end = (
                split_tokens
                if self.val_max_windows is None
                else self.val_max_windows * self.context_length + 1
            )
            if self.test_offset < val_end:
                raise ValueError(
                    f"the test window (split 'val' from token {self.test_offset}) overlaps the validation "
                    f"windows (tokens 0..{val_end}); raise data.test_offset or lower data.val_max_windows"
                )

    def _loader(self, dataset: RandomWindows | FixedWindows, sampler: Sampler | None = None) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.micro_batch_size,
            shuffle=False,  # windows are random (train) or fixed on purpose (val / test)
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        windows = RandomWindows(self.tokens["train"], self.context_length, self.train_samples, self.seed)
        trainer = self.trainer
        if trainer is None:
            return self._loader(windows)
        # On resume Lightning has restored global_step before asking for the loader: skip the
        # samples already trained on, so the data order is the uninterrupted run's.
        samples_per_step = self.train_samples // trainer.max_steps
        sampler = ResumableRankSampler(
            self.train_samples, trainer.global_rank, trainer.world_size, start=trainer.global_step * samples_per_step
        )
        return self._loader(windows, sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(FixedWindows(self.tokens["val"], self.context_length, self.val_max_windows))

    def test_dataloader(self) -> DataLoader:
        return self._loader(
            FixedWindows(
                self.tokens[self.test_split], self.context_length, self.test_max_windows, self.test_offset
            )
        )


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
        test_split=data_cfg.get("test_split", "test"),
        test_offset=int(data_cfg.get("test_offset", 0)),
    )
