"""What a run trained and was scored on, as MLflow dataset inputs (the UI's Datasets column).

One input per split the run used (train, val, test), each naming the token cache it was read from
(the corpus, its split and the tokenizer: the cache key), a digest of that split's token files (so
two runs show the same digest exactly when they read the same tokens), and, in the dataset's profile,
its number of tokens and documents. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

    from src.tracking.store import Store

CONTEXT_TAG = "mlflow.data.context"  # the UI shows it beside the dataset's name (train, val, test)
SOURCE_TYPE = "normsweep_token_cache"
DIGEST_CHARS = 12


def split_digest(entry: Mapping[str, Any]) -> str:
    """A short digest of a split's token files (their sha256 from the cache's meta.json)."""
    files = entry.get("shards") or [entry]
    joined = ",".join(str(f.get("sha256", "")) for f in files)
    return hashlib.sha256(joined.encode()).hexdigest()[:DIGEST_CHARS]


def dataset_inputs(cache_key: str, splits: Mapping[str, Mapping[str, Any]], used: Sequence[str]) -> list[DatasetInput]:
    """One input per used split; `splits` is the cache's meta.json `splits` (tokens, documents, sha256)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = []
    for split in used:
        entry = splits[split]
        profile = {"num_tokens": int(entry["tokens"]), "documents": int(entry.get("documents", 0))}
        dataset = Dataset(
            name=cache_key,
            digest=split_digest(entry),
            source_type=SOURCE_TYPE,
            source=json.dumps({"token_cache": cache_key, "split": split}),
            profile=json.dumps(profile),
        )
        inputs.append(DatasetInput(dataset, tags=[InputTag(CONTEXT_TAG, split)]))
    return inputs


def log_datasets(
    store: Store, run_id: str, cache_key: str, splits: Mapping[str, Mapping[str, Any]], used: Sequence[str]
) -> None:
    store.log_inputs(run_id, dataset_inputs(cache_key, splits, used))
