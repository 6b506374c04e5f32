"""The token cache: uint16 token files per split, plus a `meta.json` that vouches for them.

    <cache_dir>/<source cache key>-<tokenizer>/
        train.bin  val.bin  test.bin   GPT-2 token ids, uint16 (np.fromfile / np.memmap)
        meta.json                      token count, byte size and sha256 of every split file

A corpus too large for one file per split (FineWeb) lists several shard files under a split's
`shards` entry instead; `load_split` then returns a `ShardedTokens` that reads them as one array.

This module is the one writer of that format, in this order: `begin_cache` withdraws `meta.json`,
`write_tokens` writes each token file, `finish_cache` writes `meta.json` last. Every file is written
atomically (src.core.atomic_io: a temporary name in the same folder, fsynced, then renamed into place). A
split file is trusted only when `meta.json` exists and the file's size and hash match it, so a crash
mid-write, a leftover temporary file or a truncated copy is rebuilt rather than read. Two processes
preparing at once each write their own temporary files (named by pid) and replace the targets with
identical bytes.

Each document is preceded by `<|endoftext|>` (nanoGPT's convention): documents are delimited, and
every one starts from the same context. Nothing here imports torch or knows about data sources.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from src.core.atomic_io import TEMP_GLOB, atomic_file, atomic_write
from src.core.paths import require_writable

from .tokenizer import EOT_ID, EOT_TOKEN, TOKENIZER_NAME, gpt2_encoding

META_FILE = "meta.json"
TOKEN_DTYPE = np.uint16  # GPT-2's 50,257 ids fit; half the bytes of int32
_BATCH_DOCS = 64  # documents per tokenizer call: enough for its threads, bounded memory


def cache_folder(cache_dir: str | Path, cache_key: str) -> Path:
    """Where the token files of a source live: the key names documents, split and tokenizer."""
    return Path(cache_dir).expanduser().resolve() / f"{cache_key}-{TOKENIZER_NAME}"


def split_path(folder: Path, split: str) -> Path:
    return folder / f"{split}.bin"


def encode_documents(
    documents: Iterable[str], eot_after: bool = False, literal_eot_token: bool = False
) -> Iterator[np.ndarray]:
    """Token arrays, one per document, each starting with `<|endoftext|>` (or ending with it when
    `eot_after`, the convention of the FineWeb shards the study trained on).

    A literal '<|endoftext|>' inside a document is text (encode_ordinary), not a separator; with
    `literal_eot_token` it is the end-of-text token, as the study's tokenizer call allowed it.
    """
    enc = gpt2_encoding()
    docs = list(documents)
    for start in range(0, len(docs), _BATCH_DOCS):
        batch = docs[start : start + _BATCH_DOCS]
        encoded = enc.encode_batch(batch, allowed_special={EOT_TOKEN}) if literal_eot_token else enc.encode_ordinary_batch(batch)
        for ids in encoded:
            yield np.array([*ids, EOT_ID] if eot_after else [EOT_ID, *ids], dtype=TOKEN_DTYPE)


# --- writing -----------------------------------------------------------------------------------


def temporary_files(folder: Path) -> list[Path]:
    """Temporary files of writers in `folder` (alive, or killed mid-write)."""
    return list(folder.glob(TEMP_GLOB))


def cache_header(cache_key: str) -> dict[str, str]:
    """What every record of a cache folder starts with: the key, the tokenizer and the token type."""
    return {"cache_key": cache_key, "tokenizer": TOKENIZER_NAME, "dtype": np.dtype(TOKEN_DTYPE).name}


def require_cache_writable(folder: Path) -> None:
    """A token cache to be written in `folder`: ConfigError naming the field where it cannot be."""
    require_writable(
        folder, "data.cache_dir",
        f"the token cache is written to {folder}: point paths.cache_dir (or data.cache_dir) at a writable folder, "
        "or prepare the cache there first (python -m src.data)",
    )  # fmt: skip


def begin_cache(folder: Path) -> None:
    """Create `folder` and withdraw its certificate, so a crash while writing leaves a cache that
    reads as invalid. Call it before writing any token file. A folder that cannot be written is a
    ConfigError naming the field (a complete cache there is only read, and never gets here)."""
    require_cache_writable(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / META_FILE).unlink(missing_ok=True)


def write_tokens(target: Path, chunks: Iterable[np.ndarray], documents: int) -> dict[str, Any]:
    """Stream the token chunks of `documents` documents into `target` atomically; return the file's
    entry for `meta.json` (file, tokens, bytes, sha256, documents)."""
    digest, n_tokens = hashlib.sha256(), 0
    with atomic_file(target) as f:
        for chunk in chunks:
            data = np.ascontiguousarray(chunk, dtype=TOKEN_DTYPE).tobytes()
            f.write(data)
            digest.update(data)
            n_tokens += len(chunk)
    return {
        "file": target.name,
        "tokens": n_tokens,
        "bytes": n_tokens * TOKEN_DTYPE().itemsize,
        "sha256": digest.hexdigest(),
        "documents": documents,
    }


def write_json(target: Path, data: Any) -> None:
    """Write a JSON file atomically: readers see old or new, never half."""
    atomic_write(target, (json.dumps(data, indent=2) + "\n").encode())


def _split_entry(files: Sequence[dict[str, Any]], sharded: bool) -> dict[str, Any]:
    if not sharded:
        (entry,) = files  # one `<split>.bin`
        return dict(entry)
    return {
        "tokens": sum(f["tokens"] for f in files),
        "bytes": sum(f["bytes"] for f in files),
        "documents": sum(f["documents"] for f in files),
        "shards": list(files),
    }


def finish_cache(
    folder: Path, cache_key: str, files: Mapping[str, Sequence[dict[str, Any]]], sharded: bool = False
) -> None:
    """Write `meta.json` atomically from the `write_tokens` entries of each split. Call it last: its
    presence is what marks the cache complete. A sharded split lists its files under `shards`."""
    splits = {split: _split_entry(entries, sharded) for split, entries in files.items()}
    write_json(folder / META_FILE, {**cache_header(cache_key), "splits": splits})


def ensure_token_cache(
    folder: Path, cache_key: str, split_documents: Callable[[], Mapping[str, Sequence[str]]]
) -> Path:
    """Tokenize the documents into `folder` unless a valid cache is already there (then the
    documents are never read)."""
    if is_valid_cache(folder):
        return folder
    begin_cache(folder)
    documents = split_documents()
    files = {
        split: [write_tokens(split_path(folder, split), encode_documents(docs), len(docs))]
        for split, docs in documents.items()
    }
    finish_cache(folder, cache_key, files)
    return folder


# --- reading -----------------------------------------------------------------------------------


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no token cache at {folder} (missing {META_FILE}); prepare the data first")
    return json.loads(path.read_text())


def split_tokens(folder: Path) -> dict[str, int]:
    """Tokens per split, as `meta.json` records them."""
    return {split: entry["tokens"] for split, entry in read_meta(folder)["splits"].items()}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def file_matches(path: Path, entry: dict[str, Any], check_hash: bool = True) -> bool:
    """True when the file at `path` has the size (and sha256) its `write_tokens` entry recorded."""
    if not path.is_file() or path.stat().st_size != entry["bytes"]:
        return False
    return not check_hash or _sha256(path) == entry["sha256"]


def split_files(folder: Path, entry: dict[str, Any]) -> list[tuple[Path, dict[str, Any]]]:
    """(path, file entry) of every token file of one split entry in `meta.json`, in order."""
    if "shards" in entry:
        return [(folder / shard["file"], shard) for shard in entry["shards"]]
    return [(folder / entry["file"], entry)]


def is_valid_cache(folder: Path, check_hash: bool = True, splits: Sequence[str] | None = None) -> bool:
    """True when `meta.json` exists and every file of `splits` (default: every split it lists)
    matches its recorded size (and hash)."""
    try:
        meta = read_meta(folder)
        return all(
            file_matches(path, entry, check_hash)
            for split in (meta["splits"] if splits is None else splits)
            for path, entry in split_files(folder, meta["splits"][split])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False  # missing or unreadable meta.json: not a cache we can trust


class ShardedTokens:
    """Token files read as one array: `len()` and contiguous slices, all the windows need.

    Memmaps open lazily and are not pickled: DataLoader workers receive the file names and reopen
    the files, instead of a copy of the tokens.
    """

    def __init__(self, paths: Sequence[str | Path], lengths: Sequence[int]) -> None:
        if len(paths) != len(lengths):
            raise ValueError(f"{len(paths)} paths but {len(lengths)} lengths")
        kept = [(str(p), int(n)) for p, n in zip(paths, lengths, strict=True) if n > 0]
        self.paths = [p for p, _ in kept]
        self.lengths = [n for _, n in kept]
        self.bounds = np.cumsum([0, *self.lengths])  # shard i holds tokens [bounds[i], bounds[i + 1])
        self._maps: list[np.memmap] | None = None

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def _memmaps(self) -> list[np.memmap]:
        if self._maps is None:
            self._maps = [
                np.memmap(p, dtype=TOKEN_DTYPE, mode="r", shape=(n,))
                for p, n in zip(self.paths, self.lengths, strict=True)
            ]
        return self._maps

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice):
            raise TypeError("ShardedTokens supports contiguous slices only")
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise ValueError("ShardedTokens supports contiguous slices only")
        pieces = []
        shard = int(np.searchsorted(self.bounds, start, side="right")) - 1
        while start < stop:
            lo, hi = int(self.bounds[shard]), int(self.bounds[shard + 1])
            end = min(stop, hi)
            pieces.append(self._memmaps()[shard][start - lo : end - lo])
            start, shard = end, shard + 1
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=TOKEN_DTYPE)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": None}


def load_split(folder: Path, split: str) -> np.ndarray | ShardedTokens:
    """A read-only memmap of one split's tokens (a `ShardedTokens` for a sharded split), after
    checking the file sizes against `meta.json`."""
    entry = read_meta(folder)["splits"][split]
    files = split_files(folder, entry)
    for path, file_entry in files:
        if not file_matches(path, file_entry, check_hash=False):
            raise ValueError(f"{path} does not match {folder / META_FILE}; prepare the data again")
    if "shards" in entry:
        return ShardedTokens([path for path, _ in files], [e["tokens"] for _, e in files])
    if entry["tokens"] == 0:
        return np.zeros(0, dtype=TOKEN_DTYPE)  # np.memmap refuses empty files
    return np.memmap(files[0][0], dtype=TOKEN_DTYPE, mode="r")
