"""FineWeb as GPT-2 token shards: stream the documents, tokenize them in parallel, write resumable shards.

Documents come from the Hugging Face hub in streaming mode (`HuggingFaceFW/fineweb`, config
`sample-10BT`; needs the optional `datasets` package, `pip install -e '.[fineweb]'`) or from local
`.parquet` / `.jsonl` files (`data.files`), read with pyarrow / json. Every document is followed by
`<|endoftext|>`. `split_by` sends it to val: `hash`, with probability `val_fraction` by a hash of its
text (the rule of `text_files`: no seed, the same whatever the order of the stream or the number of
processes); `row_order`, the study's split, by its place in the files: the last `val_fraction` of the
rows, as `train[:99%]` / `train[99%:]` (local files only: the hub stream's length is known only at its
end). `literal_eot=token` tokenizes a literal '<|endoftext|>' in a document as the end-of-text token, as
the study's tokenizer call did; with both, the shards hold the study's train and validation tokens.

The shards live in the cache folder the DataModule reads (`DataSource.folder`), written by the
cache's one writer (`cache.write_tokens`, then `cache.finish_cache`):

    train_000000.bin  val_000000.bin  ...  shard k: the train / val documents of one stream range
    manifest.json     progress: per shard its document range [start, end), tokens, bytes, sha256
    meta.json         written last, once every document is in a shard: each split as a shard list

A shard closes at the first document boundary after `shard_tokens` tokens; its files are written
under temporary names and moved into place (src.core.atomic_io) before the manifest names them. A restart
checks the finished shards against the manifest (size and sha256), keeps the valid ones up to the
first bad one, and continues the stream after their last document: no document is tokenized twice
or lost. A lock file serializes preparers of one folder (several nodes' rank 0 on a shared disk).

Prepare once before training, with the overrides a training job will use:
    python -m src.data fineweb data.num_proc=16                  # hub stream
    python -m src.data fineweb data.files='/data/fineweb/*.parquet'
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..core.atomic_io import exclusive
from ..core.paths import ConfigError
from ..core.schema import LiteralEot, SplitBy
from .base import DataSource, fingerprint, match_files, read_documents, unit_interval
from .cache import (
    TOKEN_DTYPE,
    begin_cache,
    cache_header,
    encode_documents,
    file_matches,
    finish_cache,
    is_valid_cache,
    temporary_files,
    write_json,
    write_tokens,
)
from .tokenizer import TOKENIZER_NAME

log = logging.getLogger(__name__)

FIELD = "data.files"  # the config field that names local files, in every error about them
SUFFIXES = (".parquet", ".jsonl")
MANIFEST_FILE = "manifest.json"
# A source built in Python (`FineWebSource()`) gets what `data=fineweb` sets (conf/data/fineweb.yaml;
# tests/test_config.py keeps them equal); an argument left None takes these.
DEFAULTS: dict[str, Any] = {
    "dataset": "HuggingFaceFW/fineweb",
    "subset": "sample-10BT",
    "val_fraction": 0.01,
    "shard_tokens": 100_000_000,
    "num_proc": 8,
    "verify_checksums": True,
    "split_by": SplitBy.HASH.value,
    "literal_eot": LiteralEot.TEXT.value,
}
# Part of the cache key, per split rule; bump one if its rule or the EOT placement changes.
_SCHEMES = {SplitBy.HASH: "hash1-eotafter", SplitBy.ROW_ORDER: "rows1-eotafter"}
_DOCS_PER_TASK = 256  # documents per tokenizer task: large enough to amortize the inter-process copy


# --- where documents come from -----------------------------------------------------------------


def iter_file_documents(files: Sequence[Path], skip: int = 0) -> Iterator[str]:
    """The documents of local files in order, from document number `skip` on.

    A parquet file that lies wholly in the skipped part is passed over by its row count, unread.
    """
    import pyarrow.parquet as pq

    for path in files:
        if path.suffix == ".parquet":
            parquet = pq.ParquetFile(path)
            if "text" not in parquet.schema_arrow.names:
                raise ConfigError(
                    f"{FIELD}: {path} has no 'text' column (columns: {parquet.schema_arrow.names})"
                )
            rows = parquet.metadata.num_rows
            if skip >= rows:
                skip -= rows
                continue
            batches = parquet.iter_batches(columns=["text"], batch_size=1024)
            yield from islice((text for batch in batches for text in batch.column(0).to_pylist()), skip, None)
        else:
            docs = read_documents(path, FIELD)  # validates every line; holds one file in memory
            if skip >= len(docs):
                skip -= len(docs)
                continue
            yield from docs[skip:]
        skip = 0


def count_file_documents(files: Sequence[Path]) -> int:
    """The documents of local files: a parquet file's rows from its footer, unread; a .jsonl file's lines."""
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(path).metadata.num_rows if path.suffix == ".parquet" else len(read_documents(path, FIELD))
        for path in files
    )


def train_percent(val_fraction: float) -> int:
    """The whole percent of rows `train[:N%]` keeps; ConfigError unless `val_fraction` is whole percents."""
    percent = round(100 * (1 - val_fraction))
    if abs(percent - 100 * (1 - val_fraction)) > 1e-9:
        raise ConfigError(
            f"data.val_fraction={val_fraction}: data.split_by=row_order splits as train[:N%] / train[N%:], "
            "whole percents only (0.01 is the study's 99% / 1%)"
        )
    return percent


def first_val_row(rows: int, percent: int) -> int:
    """Where `train[percent%:]` starts among `rows` rows: Hugging Face `datasets`' closest rounding."""
    return int(round(percent * rows / 100.0))


def iter_hub_documents(dataset: str, subset: str, skip: int = 0) -> Iterator[str]:
    """The documents of a hub dataset, streamed (nothing is downloaded ahead), from number `skip` on."""
    try:
        import datasets
    except ImportError:
        # A ConfigError: one line before anything is recorded, not a traceback from inside the import.
        raise ConfigError(
            "data=fineweb: streaming FineWeb from the hub needs the `fineweb` extra (the `datasets` package): "
            "pip install -e '.[fineweb]' (or set data.files to local .parquet / .jsonl files)"
        ) from None
    stream = datasets.load_dataset(dataset, name=subset, split="train", streaming=True)
    if skip:
        stream = stream.skip(skip)
    for row in stream:
        yield row["text"]


# --- tokenizing --------------------------------------------------------------------------------


def encode_batch(
    docs: list[str], val_fraction: float | None, literal_eot_token: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A batch of documents as (tokens of all, each followed by EOT; tokens per document; is val by
    hash, or None when `val_fraction` is None: the split by row order is the caller's).

    Runs in the worker processes: one concatenated array pickles far faster than one per document.
    """
    arrays = list(encode_documents(docs, eot_after=True, literal_eot_token=literal_eot_token))
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=TOKEN_DTYPE)
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    if val_fraction is None:
        return tokens, lengths, None
    is_val = np.array([unit_interval(doc) < val_fraction for doc in docs], dtype=bool)
    return tokens, lengths, is_val


def _batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def _ordered_map(pool: Any, fn: Callable[[Any], Any], items: Iterable[Any], ahead: int) -> Iterator[Any]:
    """`fn` over `items` in order, at most `ahead` tasks in flight.

    `Pool.imap` would read its input as fast as it can, pulling the whole stream into memory
    while the workers lag behind; here the stream is read only as results are taken.
    """
    if pool is None:
        yield from map(fn, items)
        return
    pending: deque = deque()
    for item in items:
        pending.append(pool.apply_async(fn, (item,)))
        if len(pending) >= ahead:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


class _Shard:
    """The shard being filled: its documents' tokens per split and its range of the stream."""

    def __init__(self, index: int, first_doc: int) -> None:
        self.index = index
        self.first_doc = self.next_doc = first_doc
        self.parts: dict[str, list[np.ndarray]] = {split: [] for split in FineWebSource.splits}
        self.tokens = 0

    def add(self, tokens: np.ndarray, split: str) -> None:
        self.parts[split].append(tokens)
        self.tokens += len(tokens)
        self.next_doc += 1

    def write(self, folder: Path) -> dict[str, Any]:
        """Write the split files atomically; return the shard's manifest record."""
        files = {
            split: write_tokens(folder / shard_file(split, self.index), parts, len(parts))
            for split, parts in self.parts.items()
        }
        return {"index": self.index, "documents": [self.first_doc, self.next_doc], "files": files}


def shard_file(split: str, index: int) -> str:
    return f"{split}_{index:06d}.bin"


# --- the data source ---------------------------------------------------------------------------


class FineWebSource(DataSource):
    """FineWeb (hub stream or local files) tokenized into resumable uint16 shards."""

    splits = ("train", "val")  # FineWeb ships one split; the test window is taken from val (datamodule.py)

    def __init__(
        self,
        files: str | Sequence[str] | None = None,
        dataset: str | None = None,
        subset: str | None = None,
        val_fraction: float | None = None,
        shard_tokens: int | None = None,
        num_proc: int | None = None,
        verify_checksums: bool | None = None,
        split_by: str | None = None,
        literal_eot: str | None = None,
    ) -> None:
        dataset = dataset or str(DEFAULTS["dataset"])
        subset = subset or str(DEFAULTS["subset"])
        val_fraction = float(DEFAULTS["val_fraction"] if val_fraction is None else val_fraction)
        shard_tokens = int(DEFAULTS["shard_tokens"] if shard_tokens is None else shard_tokens)
        num_proc = int(DEFAULTS["num_proc"] if num_proc is None else num_proc)
        verify_checksums = bool(DEFAULTS["verify_checksums"] if verify_checksums is None else verify_checksums)
        if not 0 < val_fraction < 1:
            raise ConfigError(f"data.val_fraction must be in (0, 1), got {val_fraction}")
        if shard_tokens < 1:
            raise ConfigError(f"data.shard_tokens must be >= 1, got {shard_tokens}")
        if num_proc < 1:
            raise ConfigError(f"data.num_proc must be >= 1, got {num_proc}")
        split_by = str(DEFAULTS["split_by"] if split_by is None else split_by)
        literal_eot = str(DEFAULTS["literal_eot"] if literal_eot is None else literal_eot)
        if split_by not in tuple(SplitBy):
            raise ConfigError(f"data.split_by: {split_by!r} is not one of the valid choices: {', '.join(SplitBy)}")
        if literal_eot not in tuple(LiteralEot):
            raise ConfigError(f"data.literal_eot: {literal_eot!r} is not one of the valid choices: {', '.join(LiteralEot)}")
        if split_by == SplitBy.ROW_ORDER and not files:
            raise ConfigError(
                "data.split_by=row_order: splits the rows of data.files in file order, and the hub stream's "
                "length is known only at its end; set data.files to the local .parquet / .jsonl files"
            )
        # train[:N%]: the rows before the last val_fraction of them (row_order only)
        self.train_percent = train_percent(val_fraction) if split_by == SplitBy.ROW_ORDER else None
        self.files = match_files(files, FIELD, SUFFIXES) if files else None
        self.dataset = dataset
        self.subset = subset
        self.val_fraction = val_fraction
        self.shard_tokens = shard_tokens
        self.num_proc = num_proc
        self.verify_checksums = verify_checksums
        self.split_by = SplitBy(split_by)
        self.literal_eot = LiteralEot(literal_eot)
        self._ready: set[Path] = set()  # folders verified by this object: Lightning prepares twice

    @classmethod
    def from_config(cls, data_cfg: Mapping[str, Any]) -> FineWebSource:
        keys = (
            "files", "dataset", "subset", "val_fraction", "shard_tokens", "num_proc", "verify_checksums", "split_by",
            "literal_eot",
        )  # fmt: skip
        return cls(**{key: data_cfg.get(key) for key in keys})

    @property
    def scheme(self) -> str:
        """The split rule and the tokenizer's reading of a literal EOT, as the cache key names them."""
        scheme = _SCHEMES[self.split_by]
        return scheme if self.literal_eot == LiteralEot.TEXT else f"{scheme}-eottoken"

    def make_cache_key(self) -> str:
        # The shard size is not in the key: it moves shard boundaries, never which tokens are where.
        if self.files is None:
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{self.dataset}-{self.subset}")
            return f"fineweb-{name}-{self.scheme}-val{self.val_fraction:g}"
        return f"fineweb_files-{fingerprint(f'{self.scheme} {self.val_fraction}', self.files)}"

    def documents(self, skip: int = 0) -> Iterator[str]:
        """The document stream, from document number `skip` on."""
        if self.files is not None:
            return iter_file_documents(self.files, skip)
        return iter_hub_documents(self.dataset, self.subset, skip)

    def split_documents(self) -> dict[str, list[str]]:
        raise NotImplementedError("FineWeb does not fit in memory: prepare() streams it into shards")

    def prepare(
        self, cache_dir: str | Path, on_shard: Callable[[dict[str, Any]], None] | None = None
    ) -> Path:
        """Make sure every document is in a verified shard; resume an interrupted preparation.

        `on_shard` is called with each new shard's manifest record once the manifest names it.
        """
        folder = self.folder(cache_dir)
        if folder in self._ready:
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive(folder / ".lock", what="preparing this token cache"):  # one preparer per folder
            if not is_valid_cache(folder, check_hash=self.verify_checksums, splits=self.splits):
                self._build(folder, on_shard)
        self._ready.add(folder)
        return folder

    def _build(self, folder: Path, on_shard: Callable[[dict[str, Any]], None] | None) -> None:
        begin_cache(folder)
        manifest = self._resume(folder)
        self._remove_strays(folder, manifest)
        if not manifest["complete"]:
            self._tokenize(folder, manifest, on_shard)
        files = {split: [shard["files"][split] for shard in manifest["shards"]] for split in self.splits}
        documents = {split: sum(f["documents"] for f in entries) for split, entries in files.items()}
        if documents["val"] == 0:
            raise ConfigError(
                f"data.val_fraction={self.val_fraction}: no document went to val ({documents['train']} "
                f"documents); add documents or raise data.val_fraction"
            )
        finish_cache(folder, self.cache_key, files, sharded=True)

    def _resume(self, folder: Path) -> dict[str, Any]:
        """The manifest of the finished shards that still match their size and sha256."""
        manifest = {
            **cache_header(self.cache_key),
            "source": f"{self.dataset}/{self.subset}" if self.files is None else [str(p) for p in self.files],
            "val_fraction": self.val_fraction,
            "complete": False,
            "shards": [],
        }
        try:
            old = json.loads((folder / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return manifest  # nothing to resume
        if old.get("cache_key") != self.cache_key or old.get("tokenizer") != TOKENIZER_NAME:
            return manifest
        for shard in old.get("shards", []):
            if not all(file_matches(folder / f["file"], f) for f in shard["files"].values()):
                log.warning(
                    "shard %d does not match %s (size or sha256): tokenizing again from document %d",
                    shard["index"],
                    MANIFEST_FILE,
                    shard["documents"][0],
                )
                break
            manifest["shards"].append(shard)
        manifest["complete"] = bool(old.get("complete")) and len(manifest["shards"]) == len(old["shards"])
        return manifest

    @staticmethod
    def _remove_strays(folder: Path, manifest: dict[str, Any]) -> None:
        # Under the lock no other writer is alive: shard files the manifest does not name and
        # temporary files are leftovers of an interrupted run.
        keep = {f["file"] for shard in manifest["shards"] for f in shard["files"].values()}
        for path in [*folder.glob("*_[0-9][0-9][0-9][0-9][0-9][0-9].bin"), *temporary_files(folder)]:
            if path.name not in keep:
                path.unlink(missing_ok=True)

    def _tokenize(
        self, folder: Path, manifest: dict[str, Any], on_shard: Callable[[dict[str, Any]], None] | None
    ) -> None:
        shards = manifest["shards"]
        done = shards[-1]["documents"][1] if shards else 0
        shard = _Shard(len(shards), done)
        by_row = self.train_percent is not None
        first_val = first_val_row(count_file_documents(self.files or []), self.train_percent) if by_row else None
        encode = partial(
            encode_batch,
            val_fraction=None if by_row else self.val_fraction,
            literal_eot_token=self.literal_eot == LiteralEot.TOKEN,
        )
        batches = _batched(self.documents(skip=done), _DOCS_PER_TASK)
        pool = multiprocessing.Pool(self.num_proc) if self.num_proc > 1 else nullcontext()
        with pool as workers, tqdm(desc="tokenizing FineWeb", unit="doc", initial=done, disable=None) as bar:
            for tokens, lengths, is_val in _ordered_map(workers, encode, batches, ahead=2 * self.num_proc):
                for i, (end, n) in enumerate(zip(np.cumsum(lengths), lengths, strict=True)):
                    val = shard.next_doc >= first_val if first_val is not None else is_val[i]
                    shard.add(tokens[end - n : end], "val" if val else "train")
                    if shard.tokens >= self.shard_tokens:
                        shard = self._finish(folder, manifest, shard, on_shard)
                bar.update(len(lengths))
            if shard.next_doc > shard.first_doc:  # the last, partly filled shard
                self._finish(folder, manifest, shard, on_shard)
        if not manifest["shards"]:
            field = "data.dataset" if self.files is None else FIELD
            raise ConfigError(f"{field}: the document stream of {manifest['source']} is empty")
        manifest["complete"] = True
        write_json(folder / MANIFEST_FILE, manifest)

    @staticmethod
    def _finish(
        folder: Path,
        manifest: dict[str, Any],
        shard: _Shard,
        on_shard: Callable[[dict[str, Any]], None] | None,
    ) -> _Shard:
        """Write the shard, then record it: a shard the manifest names is always complete."""
        record = shard.write(folder)
        manifest["shards"].append(record)
        write_json(folder / MANIFEST_FILE, manifest)
        if on_shard is not None:
            on_shard(record)
        return _Shard(shard.index + 1, shard.next_doc)
