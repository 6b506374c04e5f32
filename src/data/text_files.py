"""Local text as a corpus: a glob of `.txt` files (one document each) and `.jsonl` files (one JSON
object per line, its `text` field one document).

Each document goes to train, val or test by a hash of its text: the assignment needs no seed,
survives adding or reordering files, and puts exact duplicates in the same split, so a repeated
document cannot leak from train into test.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from .sources import DataSource

SUFFIXES = (".txt", ".jsonl")
_SPLIT_SCHEME = "hash1"  # part of the cache key; bump if the assignment rule below changes


def _unit_interval(text: str) -> float:
    """A uniform number in [0, 1) determined by the document's text alone."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def read_documents(path: Path) -> list[str]:
    """The documents in one file: the whole `.txt` file, or the `text` of each `.jsonl` line."""
    if path.suffix == ".txt":
        return [path.read_text(encoding="utf-8")]
    docs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f"{path}:{lineno}: expected a JSON object with a string 'text' field")
            docs.append(record["text"])
    return docs


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
        raise FileNotFoundError(f"{field} {patterns} matched no files")
    unsupported = [str(p) for p in files if p.suffix not in suffixes]
    if unsupported:
        raise ValueError(f"{field} matched files that are neither {' nor '.join(suffixes)}: {unsupported[:5]}")
    return files


class TextFilesSource(DataSource):
    """Documents from local `.txt` / `.jsonl` files matched by one or more glob patterns."""

    def __init__(self, paths: str | Sequence[str], val_fraction: float = 0.05, test_fraction: float = 0.05):
        patterns = [paths] if isinstance(paths, str) else list(paths)
        if not (val_fraction > 0 and test_fraction > 0 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"need 0 < val_fraction, 0 < test_fraction and val_fraction + test_fraction < 1; "
                f"got val_fraction={val_fraction}, test_fraction={test_fraction}"
            )
        self.files = match_files(patterns, "data.paths", SUFFIXES)
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction

    @property
    def cache_key(self) -> str:
        # Path, size and mtime of every file stand in for their contents: hashing the contents
        # would mean reading the whole corpus just to find out the cache is valid.
        h = hashlib.sha256(f"{_SPLIT_SCHEME} {self.val_fraction} {self.test_fraction}".encode())
        for path in self.files:
            stat = path.stat()
            h.update(f"\n{path}\t{stat.st_size}\t{stat.st_mtime_ns}".encode())
        return f"text_files-{h.hexdigest()[:16]}"

    def split_documents(self) -> dict[str, list[str]]:
        splits: dict[str, list[str]] = {"train": [], "val": [], "test": []}
        for path in self.files:
            for doc in read_documents(path):
                u = _unit_interval(doc)
                split = (
                    "test"
                    if u < self.test_fraction
                    else "val"
                    if u < self.test_fraction + self.val_fraction
                    else "train"
                )
                splits[split].append(doc)
        for split, docs in splits.items():
            if not docs:
                n_docs = sum(len(d) for d in splits.values())
                raise ValueError(
                    f"split '{split}' would be empty: {n_docs} documents with val_fraction="
                    f"{self.val_fraction}, test_fraction={self.test_fraction}; add documents or raise the fractions"
                )
        return splits
