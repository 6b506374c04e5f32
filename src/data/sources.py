"""Where documents come from: the `DataSource` interface and the registry the `data/` configs name.

A source answers two questions: which documents belong to each split, and under which key their
tokens may be cached (the key must change whenever the documents or the split could). Turning
documents into cached token files is the cache layer's job (`cache.py`). A source too large to
hold in memory (FineWeb) overrides `prepare` and streams its own token files into the same
folder layout instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .cache import prepare_token_cache


class DataSource(ABC):
    """A corpus split into train / val / test documents."""

    @property
    @abstractmethod
    def cache_key(self) -> str:
        """Folder-name-safe id of the documents and their split, e.g. 'shakespeare-iambic3.0.0-split1'."""

    @abstractmethod
    def split_documents(self) -> dict[str, list[str]]:
        """Documents per split: {'train': [...], 'val': [...], 'test': [...]}, in a fixed order."""

    def prepare(self, cache_dir: str | Path) -> Path:
        """Make sure the token files exist under `cache_dir`; return their folder.

        An override (a source that streams its own tokens) must write the same layout: the
        `<split>.bin` files (or shard files listed per split) and then `meta.json` via
        `cache.write_tokens` / `cache.write_meta`, in `cache.cache_folder(cache_dir, self.cache_key)`,
        which is where the DataModule looks.
        """
        return prepare_token_cache(self, cache_dir)


# Factories import their module when called, so a source with optional dependencies (FineWeb needs
# `datasets`) costs nothing to the runs that do not use it.


def _shakespeare(cfg: Mapping[str, Any]) -> DataSource:
    from .shakespeare import ShakespeareSource

    return ShakespeareSource()


def _text_files(cfg: Mapping[str, Any]) -> DataSource:
    from .text_files import TextFilesSource

    if cfg.get("paths") is None:
        raise ValueError("data.paths is required for source 'text_files' (a glob of .txt / .jsonl files)")
    return TextFilesSource(
        cfg["paths"],
        val_fraction=float(cfg.get("val_fraction", 0.05)),
        test_fraction=float(cfg.get("test_fraction", 0.05)),
    )


def _fineweb(cfg: Mapping[str, Any]) -> DataSource:
    from .fineweb import HUB_DATASET, HUB_SUBSET, FineWebSource

    return FineWebSource(
        files=cfg.get("files"),
        dataset=cfg.get("dataset") or HUB_DATASET,
        subset=cfg.get("subset") or HUB_SUBSET,
        val_fraction=float(cfg.get("val_fraction", 0.01)),
        shard_tokens=int(cfg.get("shard_tokens", 100_000_000)),
        num_proc=int(cfg.get("num_proc", 1)),
        verify_checksums=bool(cfg.get("verify_checksums", True)),
    )


DATA_SOURCES: dict[str, Callable[[Mapping[str, Any]], DataSource]] = {
    "shakespeare": _shakespeare,
    "text_files": _text_files,
    "fineweb": _fineweb,
}


def build_source(data_cfg: Mapping[str, Any]) -> DataSource:
    """The source named by `data_cfg['source']`, built from the rest of the data config."""
    name = data_cfg.get("source")
    if name not in DATA_SOURCES:
        raise ValueError(f"unknown data.source {name!r}; valid choices: {sorted(DATA_SOURCES)}")
    return DATA_SOURCES[name](data_cfg)
