"""The token cache: one flat uint16 file per split, plus a `meta.json` that vouches for them.

    <cache_dir>/<source cache key>-<tokenizer>/
        train.bin  val.bin  test.bin   GPT-2 token ids, uint16 (np.fromfile / np.memmap)
        meta.json                      token count, byte size and sha256 of every split file

Every file is written to a temporary name in the same folder and moved into place with
`os.replace`, which is atomic, and `meta.json` is written last. A split file is trusted only when
`meta.json` exists and the file's size and hash match it, so a crash mid-write, a leftover
temporary file or a truncated copy is rebuilt rather than read. Two processes preparing at once
each write their own temporary files (named by pid) and replace the targets with identical bytes.

Each document is preceded by `<|endoftext|>` (nanoGPT's convention): documents are delimited, and
every one starts from the same context.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tokenizer import EOT_ID, TOKENIZER_NAME, gpt2_encoding

if TYPE_CHECKING:
    from .sources import DataSource

SPLITS = ("train", "val", "test")
META_FILE = "meta.json"
TOKEN_DTYPE = np.uint16  # GPT-2's 50,257 ids fit; half the bytes of int32
_BATCH_DOCS = 64  # documents per tokenizer call: enough for its threads, bounded memory


def cache_folder(cache_dir: str | Path, cache_key: str) -> Path:
    """Where the token files of a source live: the key names documents, split and tokenizer."""
    return Path(cache_dir).expanduser().resolve() / f"{cache_key}-{TOKENIZER_NAME}"


def split_path(folder: Path, split: str) -> Path:
    return folder / f"{split}.bin"


def encode_documents(documents: Iterable[str]) -> Iterator[np.ndarray]:
    """Token arrays, one per document, each starting with `<|endoftext|>`."""
    enc = gpt2_encoding()
    docs = list(documents)
    for start in range(0, len(docs), _BATCH_DOCS):
        # encode_ordinary: a literal '<|endoftext|>' inside a document is text, not a separator.
        for ids in enc.encode_ordinary_batch(docs[start : start + _BATCH_DOCS]):
            yield np.array([EOT_ID, *ids], dtype=TOKEN_DTYPE)


def _temp_path(target: Path) -> Path:
    # Unique per process and call, hidden, and never matching '<split>.bin' or 'meta.json'.
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def write_split(folder: Path, split: str, chunks: Iterable[np.ndarray]) -> dict[str, Any]:
    """Stream token chunks into `<split>.bin` atomically; return its entry for `meta.json`."""
    target = split_path(folder, split)
    tmp = _temp_path(target)
    digest, n_tokens = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                data = np.ascontiguousarray(chunk, dtype=TOKEN_DTYPE).tobytes()
                f.write(data)
                digest.update(data)
                n_tokens += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return {
        "file": target.name,
        "tokens": n_tokens,
        "bytes": n_tokens * TOKEN_DTYPE().itemsize,
        "sha256": digest.hexdigest(),
    }


def write_meta(folder: Path, cache_key: str, splits: dict[str, dict[str, Any]]) -> None:
    """Write `meta.json` atomically. Call it last: its presence is what marks the cache complete."""
    meta = {
        "cache_key": cache_key,
        "tokenizer": TOKENIZER_NAME,
        "dtype": np.dtype(TOKEN_DTYPE).name,
        "splits": splits,
    }
    target = folder / META_FILE
    tmp = _temp_path(target)
    try:
        tmp.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no token cache at {folder} (missing {META_FILE}); prepare the data first")
    return json.loads(path.read_text())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def is_valid_cache(folder: Path, check_hash: bool = True) -> bool:
    """True when `meta.json` exists and every split file matches its recorded size (and hash)."""
    try:
        meta = read_meta(folder)
        for split in SPLITS:
            entry = meta["splits"][split]
            path = split_path(folder, split)
            if not path.is_file() or path.stat().st_size != entry["bytes"]:
                return False
            if check_hash and _sha256(path) != entry["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False  # missing or unreadable meta.json: not a cache we can trust
    return True


def prepare_token_cache(source: DataSource, cache_dir: str | Path) -> Path:
    """Tokenize `source` into its cache folder unless a valid cache is already there."""
    folder = cache_folder(cache_dir, source.cache_key)
    if is_valid_cache(folder):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    # Withdraw the stale certificate first, so a crash below leaves a cache that reads as invalid.
    (folder / META_FILE).unlink(missing_ok=True)
    documents = source.split_documents()
    entries = {split: write_split(folder, split, encode_documents(documents[split])) for split in SPLITS}
    for split, entry in entries.items():
        entry["documents"] = len(documents[split])
    write_meta(folder, source.cache_key, entries)
    return folder


def load_split(folder: Path, split: str) -> np.ndarray:
    """A read-only memmap of one split's tokens, after checking its size against `meta.json`."""
    entry = read_meta(folder)["splits"][split]
    path = split_path(folder, split)
    if not path.is_file() or path.stat().st_size != entry["bytes"]:
        raise ValueError(f"{path} does not match {folder / META_FILE}; prepare the data again")
    if entry["tokens"] == 0:
        return np.zeros(0, dtype=TOKEN_DTYPE)  # np.memmap refuses empty files
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r")
