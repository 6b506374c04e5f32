"""Local text as a corpus: a glob of `.txt` files (one document each) and `.jsonl` files (one JSON
object per line, its `text` field one document).

Each document goes to train, val or test by a hash of its text: the assignment needs no seed,
survives adding or reordering files, and puts exact duplicates in the same split, so a repeated
document cannot leak from train into test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.paths import ConfigError
from .base import DataSource, fingerprint, match_files, read_documents, unit_interval

FIELD = "data.paths"  # the config field that names the files, in every error about them
SUFFIXES = (".txt", ".jsonl")
_SPLIT_SCHEME = "hash1"  # part of the cache key; bump if the assignment rule below changes
# A source built in Python gets the fractions `data=text_files` sets (conf/data/text_files.yaml; a test keeps them equal).
VAL_FRACTION = 0.05
TEST_FRACTION = 0.05


class TextFilesSource(DataSource):
    """Documents from local `.txt` / `.jsonl` files matched by one or more glob patterns."""

    def __init__(self, paths: str | Sequence[str], val_fraction: float | None = None, test_fraction: float | None = None):
        val_fraction = float(VAL_FRACTION if val_fraction is None else val_fraction)
        test_fraction = float(TEST_FRACTION if test_fraction is None else test_fraction)
        patterns = [paths] if isinstance(paths, str) else list(paths)
        if not (val_fraction > 0 and test_fraction > 0 and val_fraction + test_fraction < 1):
            raise ConfigError(
                f"need 0 < data.val_fraction, 0 < data.test_fraction and their sum < 1; "
                f"got val_fraction={val_fraction}, test_fraction={test_fraction}"
            )
        self.files = match_files(patterns, FIELD, SUFFIXES)
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction

    @classmethod
    def from_config(cls, data_cfg: Mapping[str, Any]) -> TextFilesSource:
        if data_cfg.get("paths") is None:
            raise ConfigError(f"{FIELD} is required for source 'text_files' (a glob of .txt / .jsonl files)")
        return cls(
            data_cfg["paths"],
            val_fraction=data_cfg.get("val_fraction"),
            test_fraction=data_cfg.get("test_fraction"),
        )

    def make_cache_key(self) -> str:
        scheme = f"{_SPLIT_SCHEME} {self.val_fraction} {self.test_fraction}"
        return f"text_files-{fingerprint(scheme, self.files)}"

    def split_of(self, document: str) -> str:
        u = unit_interval(document)
        if u < self.test_fraction:
            return "test"
        return "val" if u < self.test_fraction + self.val_fraction else "train"

    def split_documents(self) -> dict[str, list[str]]:
        splits: dict[str, list[str]] = {split: [] for split in self.splits}
        n_docs = 0
        for path in self.files:
            for doc in read_documents(path, FIELD):
                splits[self.split_of(doc)].append(doc)
                n_docs += 1
        if not any(doc.strip() for docs in splits.values() for doc in docs):
            shown = ", ".join(str(p) for p in self.files[:3]) + (", ..." if len(self.files) > 3 else "")
            raise ConfigError(
                f"{FIELD}: the corpus is empty: {len(self.files)} file(s) ({shown}) hold {n_docs} documents "
                "and no text"
            )
        for split, docs in splits.items():
            if not docs:
                raise ConfigError(
                    f"split '{split}' would be empty: {n_docs} documents with data.val_fraction="
                    f"{self.val_fraction}, data.test_fraction={self.test_fraction}; add documents to "
                    f"{FIELD} or raise the fractions"
                )
        return splits
