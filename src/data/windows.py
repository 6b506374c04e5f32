"""Datasets of `(x, y)` windows over a flat token array: y is x shifted left by one token.

`RandomWindows` (training) draws the start of window i from a generator seeded by (seed, i), so an
item depends on its index alone. `ResumableRankSampler` deals indices round-robin to the ranks, so
with W ranks of micro-batch B, step k covers exactly the indices [k*W*B, (k+1)*W*B): the same
global batch a single process sees with batch W*B; on resume it starts after the samples done.

`OrderedWindows` (training, `data.order=in_order`) is the study's order instead: window i starts at
i * context_length, so the run reads its split once from the first token, consecutive and unshuffled.

`FixedWindows` (val / test) tiles the array with non-overlapping windows, window k starting at
offset + k * context_length, so every run is scored on identical tokens.

The token array is anything with `len()` and contiguous slicing to a numpy array (`TokenArray`):
an array, a memmap, or a `cache.ShardedTokens` over several shard files.

Invariants the training runs rely on (tests/test_data.py checks each):
  - window i of `RandomWindows` is a function of (tokens, context_length, seed, i) only: no state,
    no epoch, no rank, so any process, worker or resumed run draws the same window for index i;
  - every window is contiguous, and y is x shifted left by one token;
  - `ResumableRankSampler` hands sample g to rank g % world_size; the ranks' shares are disjoint and
    together cover [start, num_samples) exactly, and at a step boundary they form the global batch
    of a single process; `len` is the full share whatever `start` is;
  - `FixedWindows` k starts at offset + k * context_length: no token is scored twice, and every run
    is scored on identical windows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler


class TokenArray(Protocol):
    def __len__(self) -> int: ...

    def __getitem__(self, key: slice) -> np.ndarray: ...


class _TokenWindows(Dataset):
    """Shared plumbing: the token array, window slicing, and pickling that reopens memmaps."""

    def __init__(self, tokens: TokenArray, context_length: int) -> None:
        if context_length < 1:
            raise ValueError(f"context_length must be >= 1, got {context_length}")
        if len(tokens) < context_length + 1:
            raise ValueError(
                f"{len(tokens)} tokens are too few for one window of context_length={context_length} "
                f"(need {context_length + 1})"
            )
        self.tokens = tokens
        self.context_length = context_length

    def _window(self, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = torch.from_numpy(self.tokens[start : start + self.context_length + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]

    def __getstate__(self) -> dict[str, Any]:
        # Worker processes started by spawn receive the dataset pickled; a memmap would be pickled
        # as a full in-memory copy, so send its file name and reopen it on the other side.
        state = self.__dict__.copy()
        if isinstance(self.tokens, np.memmap) and self.tokens.filename is not None:
            state["tokens"] = (
                self.tokens.filename,
                self.tokens.dtype.str,
                self.tokens.offset,
                self.tokens.shape,
            )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["tokens"], tuple):
            filename, dtype, offset, shape = state["tokens"]
            state["tokens"] = np.memmap(filename, dtype=dtype, mode="r", offset=offset, shape=shape)
        self.__dict__.update(state)


class RandomWindows(_TokenWindows):
    """`num_samples` training windows at random starts, window i fixed by (seed, i)."""

    def __init__(self, tokens: TokenArray, context_length: int, num_samples: int, seed: int) -> None:
        super().__init__(tokens, context_length)
        self.num_samples = num_samples
        self.seed = seed
        self.num_starts = len(tokens) - context_length  # last start still leaves room for y

    def __len__(self) -> int:
        return self.num_samples

    def start(self, index: int) -> int:
        if not 0 <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        return int(np.random.default_rng((self.seed, index)).integers(self.num_starts))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._window(self.start(index))


class OrderedWindows(_TokenWindows):
    """`num_samples` consecutive training windows from token 0: the study's `BigTrainDataset`, whose
    micro-batch k holds windows k*B .. (k+1)*B - 1 of the split cut into context_length pieces."""

    def __init__(self, tokens: TokenArray, context_length: int, num_samples: int) -> None:
        super().__init__(tokens, context_length)
        if num_samples * context_length + 1 > len(tokens):
            raise ValueError(
                f"{num_samples} consecutive windows of {context_length} need {num_samples * context_length + 1} "
                f"tokens, the split has {len(tokens)}"
            )
        self.num_samples = num_samples

    def __len__(self) -> int:
        return self.num_samples

    def start(self, index: int) -> int:
        if not 0 <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        return index * self.context_length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._window(self.start(index))


class FixedWindows(_TokenWindows):
    """Non-overlapping windows from token `offset` on, at most `max_windows` of them."""

    def __init__(
        self, tokens: TokenArray, context_length: int, max_windows: int | None = None, offset: int = 0
    ) -> None:
        super().__init__(tokens, context_length)
        # Each window needs one extra token for y.
        available = (len(tokens) - offset - 1) // context_length if offset >= 0 else 0
        if available < 1:
            raise ValueError(
                f"offset {offset} leaves no window of context_length={context_length} in {len(tokens)} tokens"
            )
        self.offset = offset
        self.num_windows = available if max_windows is None else min(available, max_windows)

    def __len__(self) -> int:
        return self.num_windows

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.num_windows:
            raise IndexError(f"window {index} out of range for {self.num_windows} windows")
        return self._window(self.offset + index * self.context_length)


class ResumableRankSampler(Sampler[int]):
    """This rank's share of the training samples, able to start part-way through.

    Sample g goes to rank g % world_size, so at every step the ranks together hold exactly the
    global batch a single process would draw (global batch b = samples b*B .. (b+1)*B - 1). On
    resume, iteration starts at `start` (samples already trained on), while `len` still reports
    the full share: Lightning restores its within-epoch batch counter and counts on that length.
    """

    def __init__(self, num_samples: int, rank: int = 0, world_size: int = 1, start: int = 0) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} out of range for world_size {world_size}")
        if num_samples % world_size:
            raise ValueError(f"{num_samples} samples do not split evenly over {world_size} ranks")
        self.num_samples, self.rank, self.world_size, self.start = num_samples, rank, world_size, start

    def __len__(self) -> int:
        return self.num_samples // self.world_size

    def __iter__(self) -> Iterator[int]:
        first = self.start + (self.rank - self.start) % self.world_size  # first g >= start on this rank
        return iter(range(first, self.num_samples, self.world_size))
