"""The Lightning DataModule: token cache in, window batches out.

`prepare_data` (Lightning runs it on one process per node) builds the token cache if needed;
`setup` (every process) memory-maps the splits. Training batches come from `RandomWindows`,
which are already in random order, so the loader does not shuffle (or, with `order="in_order"`, from
`OrderedWindows`, the study's consecutive windows); `ResumableRankSampler` gives
each rank its share (the global batches match a single-process run) and resumes mid-run
(see windows.py). The Trainer runs with `use_distributed_sampler=False` so Lightning keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Sampler

from ..core.paths import ConfigError
from ..core.schema import DataOrder
from .base import DataSource, build_source, check_loader_values
from .cache import load_split, split_tokens
from .windows import FixedWindows, OrderedWindows, RandomWindows, ResumableRankSampler, TokenArray


class TokenDataModule(L.LightningDataModule):
    """Random training windows and fixed val/test windows over a `DataSource`'s cached tokens.

    Training draws `global_batch_size` windows per step for `max_steps` steps (the run's budget),
    all ranks together. The test windows may come from another split at an offset: FineWeb has
    only train and val, and the study scores a fixed window deep inside val, past the windows
    validation uses.

    Every value a user can get wrong is a `ConfigError`: the window caps and the test split when
    the module is built, the split sizes (one window of `context_length` + 1 tokens at least, the
    test window inside its split and clear of validation) as soon as the tokens are prepared.
    """

    def __init__(
        self,
        source: DataSource,
        cache_dir: str | Path,
        context_length: int,
        micro_batch_size: int,
        global_batch_size: int,
        max_steps: int,
        seed: int,
        val_max_windows: int | None = None,
        test_max_windows: int | None = None,
        num_workers: int = 0,
        test_split: str = "test",
        test_offset: int = 0,
        order: str = DataOrder.DRAWN.value,
    ) -> None:
        super().__init__()
        if order not in tuple(DataOrder):
            raise ConfigError(f"data.order: {order!r} is not one of the valid choices: {', '.join(DataOrder)}")
        check_loader_values(val_max_windows, test_max_windows, num_workers, test_offset)
        if test_split not in source.splits:
            raise ConfigError(f"data.test_split={test_split!r}; valid choices: {', '.join(source.splits)}")
        if global_batch_size < 1 or max_steps < 1:
            raise ValueError(
                f"need global_batch_size >= 1 and max_steps >= 1, got {global_batch_size}, {max_steps}"
            )
        self.source = source
        self.cache_dir = Path(cache_dir)
        self.context_length = context_length
        self.micro_batch_size = micro_batch_size
        self.global_batch_size = global_batch_size
        self.max_steps = max_steps
        self.seed = seed
        self.val_max_windows = val_max_windows
        self.test_max_windows = test_max_windows
        self.num_workers = num_workers
        self.test_split = test_split
        self.test_offset = test_offset
        self.order = order
        self.tokens: dict[str, TokenArray] = {}

    @property
    def folder(self) -> Path:
        """The cache folder holding this source's token files."""
        return self.source.folder(self.cache_dir)

    @property
    def train_samples(self) -> int:
        """Training windows in the whole run: one global batch per step."""
        return self.global_batch_size * self.max_steps

    @property
    def used_splits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(("train", "val", self.test_split)))

    @property
    def num_tokens(self) -> dict[str, int]:
        """Tokens per split (after `setup`)."""
        return {split: len(tokens) for split, tokens in self.tokens.items()}

    def prepare_data(self) -> None:
        """Build the token cache if needed, then check that the splits hold the windows asked of them.

        Lightning calls it first in a fit (before the run's MLflow record opens, src/training/run_life.py),
        so a corpus too small for the run is a `ConfigError` and not a failed run.
        """
        self.check(split_tokens(self.source.prepare(self.cache_dir)))  # prepare returns `self.folder`

    def setup(self, stage: str | None = None) -> None:
        if self.tokens:
            return  # Lightning calls setup once per stage; the memmaps serve them all
        tokens = {split: load_split(self.folder, split) for split in self.used_splits}
        self.check({split: len(array) for split, array in tokens.items()})  # ranks that did not prepare
        self.tokens = tokens

    def check(self, num_tokens: Mapping[str, int]) -> None:
        """Raise a `ConfigError` unless every split used has a window and the test window fits."""
        need = self.context_length + 1
        for split in self.used_splits:
            if num_tokens[split] < need:
                raise ConfigError(
                    f"split '{split}' has {num_tokens[split]} tokens, fewer than context_length + 1 = {need} "
                    f"(one window at seq_len={self.context_length}); use a shorter seq_len or more {split} data"
                )
        self._check_test_window(num_tokens[self.test_split])
        need = self.train_samples * self.context_length + 1
        if self.order == DataOrder.IN_ORDER and num_tokens["train"] < need:
            raise ConfigError(
                f"data.order=in_order: {self.train_samples} consecutive windows of {self.context_length} tokens need "
                f"{need} train tokens, the split has {num_tokens['train']}; use data.order=drawn, fewer steps or more data"
            )

    def _check_test_window(self, n_tokens: int) -> None:
        if self.test_offset < 0 or self.test_offset + self.context_length + 1 > n_tokens:
            raise ConfigError(
                f"data.test_offset={self.test_offset} leaves no test window in split '{self.test_split}' "
                f"({n_tokens} tokens, context_length={self.context_length})"
            )
        # Scored once at the end, the test tokens must not be among those validated on during training.
        if self.test_split == "val":
            val_end = (
                n_tokens if self.val_max_windows is None else self.val_max_windows * self.context_length + 1
            )
            if self.test_offset < val_end:
                raise ConfigError(
                    f"the test window (split 'val' from token {self.test_offset}) overlaps the validation "
                    f"windows (tokens 0..{val_end}); raise data.test_offset or lower data.val_max_windows"
                )

    def _loader(self, dataset: RandomWindows | OrderedWindows | FixedWindows, sampler: Sampler | None = None) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.micro_batch_size,
            shuffle=False,  # windows are random (train) or fixed on purpose (val / test)
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        windows: RandomWindows | OrderedWindows
        if self.order == DataOrder.IN_ORDER:
            windows = OrderedWindows(self.tokens["train"], self.context_length, self.train_samples)
        else:
            windows = RandomWindows(self.tokens["train"], self.context_length, self.train_samples, self.seed)
        trainer = self.trainer
        if trainer is None:
            return self._loader(windows)
        # On resume Lightning has restored global_step before asking for the loader: skip the
        # global batches already trained on, so the data order is the uninterrupted run's.
        sampler = ResumableRankSampler(
            self.train_samples,
            trainer.global_rank,
            trainer.world_size,
            start=trainer.global_step * self.global_batch_size,
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
    global_batch_size: int,
    max_steps: int,
    seed: int,
) -> TokenDataModule:
    """A `TokenDataModule` from a `data/` config group (source, cache_dir and loader fields), for a
    run of `max_steps` steps of `global_batch_size` windows of `context_length` (the run's seq_len)."""
    if data_cfg.get("cache_dir") is None:
        raise ConfigError("data.cache_dir is required (the folder that holds token caches)")
    return TokenDataModule(
        source=build_source(data_cfg),
        cache_dir=data_cfg["cache_dir"],
        context_length=context_length,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        max_steps=max_steps,
        seed=seed,
        val_max_windows=data_cfg.get("val_max_windows"),
        test_max_windows=data_cfg.get("test_max_windows"),
        num_workers=int(data_cfg.get("num_workers", 0)),
        test_split=data_cfg.get("test_split", "test"),
        test_offset=int(data_cfg.get("test_offset", 0)),
        order=str(data_cfg.get("order", DataOrder.DRAWN.value)),
    )
