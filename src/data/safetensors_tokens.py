"""Tokens already made, in the study's format: `train.safetensors` and `validation.safetensors`, each a
safetensors file holding one uint16 vector named `tokens` (GPT-2 ids, every document followed by
`<|endoftext|>`), the files the study's `prepare_datasets.py` writes and its runs trained on.

A user with the study's published token files trains on exactly its tokens: `data=safetensors
data.folder=<the folder holding the two files>`. Preparing copies each vector into the token cache
(`cache.write_tokens`: sizes and sha256 in `meta.json`, as for every source); nothing is tokenized.

The file is read by its published layout, no library needed: 8 bytes, a little-endian unsigned
length N; N bytes of JSON naming each tensor's dtype, shape and [begin, end) byte offsets into the
data that follows; the data, little-endian. The vector is memory-mapped, never read whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic_io import exclusive
from ..core.paths import ConfigError
from .base import DataSource, fingerprint
from .cache import (
    TOKEN_DTYPE,
    begin_cache,
    finish_cache,
    is_valid_cache,
    split_path,
    write_tokens,
)
from .tokenizer import EOT_ID, VOCAB_SIZE

FIELD = "data.folder"  # the config field that names the folder, in every error about it
FILES = {"train": "train.safetensors", "val": "validation.safetensors"}  # our split -> the study's file name
TENSOR = "tokens"
DTYPE = "U16"  # safetensors' name for uint16, the study's token type and the cache's
_SCHEME = "safetensors1"  # part of the cache key; bump if the copy changes what lands in the cache
_CHUNK = 1 << 24  # tokens per piece copied: 32 MB, bounded memory whatever the file's size


def read_tokens(path: Path) -> np.memmap:
    """The `tokens` vector of a safetensors file, memory-mapped. ConfigError naming `data.folder` and the
    file when it is not one uint16 vector named `tokens` in that layout."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{FIELD}: {path} {why}; the study's token files hold one {DTYPE} vector named '{TENSOR}'")

    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= size - 8:
            raise bad("is not a safetensors file (no header)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, ValueError):
            raise bad("is not a safetensors file (its header is not JSON)") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"} if isinstance(header, dict) else {}
    entry = tensors.get(TENSOR)
    if not isinstance(entry, dict):
        raise bad(f"holds no tensor '{TENSOR}' (it holds {sorted(tensors)})")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if entry.get("dtype") != DTYPE or not isinstance(shape, list) or len(shape) != 1:
        raise bad(f"holds '{TENSOR}' as {entry.get('dtype')} of shape {shape}")
    begin, end = offsets if isinstance(offsets, list) and len(offsets) == 2 else (0, -1)
    if end - begin != shape[0] * np.dtype(TOKEN_DTYPE).itemsize or 8 + n + end > size:
        raise bad(f"is cut short or inconsistent ('{TENSOR}' at bytes {begin}..{end} of its data)")
    if shape[0] == 0:
        return np.zeros(0, dtype=TOKEN_DTYPE)  # type: ignore[return-value]  # np.memmap refuses an empty view
    return np.memmap(path, dtype=np.dtype(TOKEN_DTYPE).newbyteorder("<"), mode="r", offset=8 + n + begin, shape=(shape[0],))


def copy_tokens(tokens: np.ndarray, source: Path, target: Path) -> dict[str, Any]:
    """Copy the vector into a cache file in bounded pieces, each checked to hold GPT-2 ids only; its
    `meta.json` entry counts a document per end-of-text token (the study's files end each with one)."""
    documents = 0

    def pieces() -> Iterator[np.ndarray]:
        nonlocal documents
        for start in range(0, len(tokens), _CHUNK):
            piece = np.asarray(tokens[start : start + _CHUNK], dtype=TOKEN_DTYPE)
            if len(piece) and int(piece.max()) >= VOCAB_SIZE:
                raise ConfigError(f"{FIELD}: {source} holds token id {int(piece.max())}, beyond GPT-2's {VOCAB_SIZE} tokens")
            documents += int(np.count_nonzero(piece == EOT_ID))
            yield piece

    entry = write_tokens(target, pieces(), 0)
    return {**entry, "documents": documents}


class SafetensorsTokensSource(DataSource):
    """The study's token files: `train.safetensors` -> train, `validation.safetensors` -> val."""

    splits = ("train", "val")  # as FineWeb's: the test window is taken from val (datamodule.py)

    def __init__(self, folder: str | Path) -> None:
        self.root = Path(folder).expanduser().resolve()
        missing = [name for name in FILES.values() if not (self.root / name).is_file()]
        if missing:
            raise ConfigError(
                f"{FIELD}: {self.root} has no {' and no '.join(missing)} (the study's token folder holds "
                f"{' and '.join(FILES.values())})"
            )
        self.paths = {split: self.root / name for split, name in FILES.items()}
        self._ready: set[Path] = set()  # folders verified by this object: Lightning prepares twice

    @classmethod
    def from_config(cls, data_cfg: Mapping[str, Any]) -> SafetensorsTokensSource:
        if data_cfg.get("folder") is None:
            raise ConfigError(f"{FIELD} is required for source 'safetensors' (the folder holding {' and '.join(FILES.values())})")
        return cls(data_cfg["folder"])

    def make_cache_key(self) -> str:
        return f"safetensors-{fingerprint(_SCHEME, list(self.paths.values()))}"

    def split_documents(self) -> dict[str, list[str]]:
        raise NotImplementedError("the study's files hold tokens, not documents: prepare() copies them")

    def prepare(self, cache_dir: str | Path) -> Path:
        folder = self.folder(cache_dir)
        if folder in self._ready:
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive(folder / ".lock", what="preparing this token cache"):  # one preparer per folder
            if not is_valid_cache(folder):
                vectors = {split: read_tokens(path) for split, path in self.paths.items()}  # every file checked first
                begin_cache(folder)
                files = {
                    split: [copy_tokens(tokens, self.paths[split], split_path(folder, split))]
                    for split, tokens in vectors.items()
                }
                finish_cache(folder, self.cache_key, files)
        self._ready.add(folder)
        return folder
