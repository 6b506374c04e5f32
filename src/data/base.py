"""The `DataSource` interface, the file helpers its sources share, and the registry of sources.

A source answers two questions: which documents belong to each split, and under which key their
tokens may be cached (the key must change whenever the documents or the split could). Turning
documents into cached token files is the cache layer's job (`cache.py`); a source too large to hold
in memory (FineWeb) overrides `prepare` and streams its own token files through the same writer.

Every problem a user can fix in their corpus (a glob matching nothing, a file that is not UTF-8, an
empty corpus) is a `ConfigError` naming the config field and the file: training raises it while
preparing the data, before any run is recorded. Nothing here imports torch.

The registry (`DATA_SOURCES`) names each source the `data/` configs name (`data.source`) as
"module:class"; the module is imported only when its source is built, so a source with optional
dependencies (FineWeb reads parquet with pyarrow) costs nothing to the runs that do not use it, and
the sources, which import this module, are never imported by it at load time.
"""

from __future__ import annotations

import glob
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from functools import cached_property
from importlib import import_module
from pathlib import Path
from typing import Any

from ..core.paths import ConfigError
from .cache import cache_folder, ensure_token_cache, is_valid_cache, require_cache_writable

# The splits a corpus may have, in the order they are written and reported. A source with fewer
# (FineWeb: train and val) narrows `DataSource.splits`.
SPLITS = ("train", "val", "test")


class NoFilesMatched(ConfigError, FileNotFoundError):
    """A glob of a config field matched no file: a config error, and a missing file."""


class DataSource(ABC):
    """A corpus split into documents per split, cached under a key that names them."""

    splits: tuple[str, ...] = SPLITS

    @classmethod
    @abstractmethod
    def from_config(cls, data_cfg: Mapping[str, Any]) -> DataSource:
        """The source built from the `data/` config group's fields (see `conf/data/*.yaml`)."""

    @abstractmethod
    def make_cache_key(self) -> str:
        """Folder-name-safe id of the documents and their split, e.g. 'shakespeare-iambic3.0.0-split1'."""

    @abstractmethod
    def split_documents(self) -> dict[str, list[str]]:
        """Documents per split, {'train': [...], 'val': [...], 'test': [...]}, in a fixed order."""

    @cached_property
    def cache_key(self) -> str:
        # Computed once per source: for local files it reads every file's size and mtime.
        return self.make_cache_key()

    def folder(self, cache_dir: str | Path) -> Path:
        """The folder under `cache_dir` that holds this source's token files: the one place it is derived."""
        return cache_folder(cache_dir, self.cache_key)

    def prepare(self, cache_dir: str | Path) -> Path:
        """Make sure the token files exist under `cache_dir`; return their folder."""
        return ensure_token_cache(self.folder(cache_dir), self.cache_key, self.split_documents)


# --- local files -------------------------------------------------------------------------------


def _check_max_windows(field: str, value: Any) -> None:
    # 0 would silently score nothing (a run without a test loss); null means the whole split.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{field} must be an integer >= 1 or null (the whole split), got {value!r}")


def check_loader_values(val_max_windows: Any, test_max_windows: Any, num_workers: int, test_offset: int) -> None:
    """The data group's window and loader values: the DataModule checks them as it is built, and the
    config's check (src.training.run_spec) before torch and Lightning are imported."""
    _check_max_windows("data.val_max_windows", val_max_windows)
    _check_max_windows("data.test_max_windows", test_max_windows)
    if num_workers < 0:  # the DataLoader would refuse it only as the fit starts, after the run is recorded
        raise ConfigError(f"data.num_workers: must be >= 0 (0: windows read in the training process), got {num_workers}")
    if test_offset < 0:
        raise ConfigError(f"data.test_offset: must be >= 0 (a token position in data.test_split), got {test_offset}")


def match_files(patterns: str | Sequence[str], field: str, suffixes: Sequence[str]) -> list[Path]:
    """The files matched by one or more globs, sorted (a stable document order), all of `suffixes`.

    `field` names the config field in errors: no match, or a matched file of another kind.
    """
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    matches = sorted(
        {
            Path(p).resolve()
            for pattern in patterns
            for p in glob.glob(str(Path(pattern).expanduser()), recursive=True)
        }
    )
    files = [p for p in matches if p.is_file()]
    if not files:
        folders = [p for p in matches if p.is_dir()]
        if folders:  # a folder named where files were meant: say so, and how to take its files
            globs = [str(Path(f) / "**" / f"*{suffixes[0]}") for f in folders[:3]]
            raise NoFilesMatched(
                f"{field} {patterns} matched only folders ({', '.join(map(str, folders[:3]))}), no files: "
                f"name the files, or glob inside the folder (e.g. {globs[0]})"
            )
        raise NoFilesMatched(f"{field} {patterns} matched no files")
    unsupported = [str(p) for p in files if p.suffix not in suffixes]
    if unsupported:
        raise ConfigError(
            f"{field} matched files that are neither {' nor '.join(suffixes)}: {unsupported[:5]}"
        )
    return files


def _not_utf8(path: Path, field: str) -> ConfigError:
    """The error for a file that does not decode as UTF-8, with the line and byte of the first bad byte."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return ConfigError(
            f"{field}: {path} is not UTF-8 text (line {line}, byte {err.start}: {err.reason}); "
            "convert it to UTF-8 or leave it out of the glob"
        )
    return ConfigError(f"{field}: {path} is not UTF-8 text")  # the decoder failed on a read, not the bytes


def read_documents(path: Path, field: str) -> list[str]:
    """The documents in one file: the whole `.txt` file, or the `text` of each `.jsonl` line.

    `field` names the config field that matched the file, in errors.
    """
    try:
        if path.suffix == ".txt":
            return [path.read_text(encoding="utf-8")]
        return _read_jsonl(path, field)
    except UnicodeDecodeError:
        raise _not_utf8(path, field) from None


def _read_jsonl(path: Path, field: str) -> list[str]:
    docs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{field}: {path}:{lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ConfigError(
                    f"{field}: {path}:{lineno}: expected a JSON object with a string 'text' field"
                )
            docs.append(record["text"])
    return docs


def fingerprint(scheme: str, files: Sequence[Path]) -> str:
    """16 hex digits naming `scheme` (the split rule and its parameters) and the files' path, size and mtime.

    Size and mtime stand in for the contents: hashing the contents would mean reading the whole
    corpus just to find out that its cache is valid.
    """
    h = hashlib.sha256(scheme.encode())
    for path in files:
        stat = path.stat()
        h.update(f"\n{path}\t{stat.st_size}\t{stat.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def unit_interval(text: str) -> float:
    """A uniform number in [0, 1) determined by the document's text alone: the split assignment of
    the local-file sources, so it needs no seed and is the same in any order or process."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


# --- the registry of sources
DATA_SOURCES: dict[str, str] = {
    "shakespeare": "shakespeare:ShakespeareSource",
    "text_files": "text_files:TextFilesSource",
    "fineweb": "fineweb:FineWebSource",
    "safetensors": "safetensors_tokens:SafetensorsTokensSource",
}


def source_class(name: str) -> type[DataSource]:
    """The class registered as `data.source=name`."""
    if name not in DATA_SOURCES:
        raise ConfigError(f"unknown data.source {name!r}; valid choices: {', '.join(sorted(DATA_SOURCES))}")
    module, cls = DATA_SOURCES[name].split(":")
    return getattr(import_module(f"{__package__}.{module}"), cls)


def build_source(data_cfg: Mapping[str, Any]) -> DataSource:
    """The source named by `data_cfg['source']`, built from the rest of the data config."""
    return source_class(data_cfg.get("source")).from_config(data_cfg)


def check_data(data_cfg: Mapping[str, Any]) -> None:
    """What the data config and its files decide, answered by the config's check (src.training.run_spec)
    before torch and Lightning are imported: the source's own fields and files, built as the run builds
    it (a split rule, a token folder without its files, a glob matching nothing), and the token cache's
    folder, which must be writable unless a complete cache is there already (its files' sizes; their
    hashes are checked as the data is prepared)."""
    source = build_source(data_cfg)
    if data_cfg.get("cache_dir") is not None:
        folder = source.folder(data_cfg["cache_dir"])
        if not is_valid_cache(folder, check_hash=False, splits=source.splits):
            require_cache_writable(folder)
