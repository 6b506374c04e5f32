"""The FineWeb source, offline: local parquet / jsonl files (and a stand-in for the hub's stream)
tokenized into shards that decode back to the documents, resume after an interruption, and are
checked against their manifest."""

from __future__ import annotations

import json
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from src.core.paths import ConfigError, compose
from src.data import fineweb
from src.data.__main__ import main as data_main
from src.data.base import build_source, unit_interval
from src.data.cache import ShardedTokens, is_valid_cache, load_split, read_meta
from src.data.datamodule import build_datamodule
from src.data.fineweb import MANIFEST_FILE, FineWebSource
from src.data.tokenizer import EOT_ID, gpt2_encoding

VAL_FRACTION = 0.1
SHARD_TOKENS = 2000  # ~6 shards of ~50 documents for the corpus below
ROWS_PER_PARQUET = 100


def _documents(n: int = 300) -> list[str]:
    """Distinct documents of varied length, with non-ASCII text, newlines and a literal EOT string."""
    docs = [f"Document {i}: naïve café, line one.\nLine two of {i}. " * (1 + i % 4) for i in range(n)]
    docs[7] = "A document that mentions <|endoftext|> as plain text."
    return docs


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[str, list[str]]:
    """(glob, documents in stream order): two parquet files, then one jsonl file (names sort so)."""
    docs = _documents()
    root = tmp_path / "fineweb"
    root.mkdir()
    for k in range(2):
        part = docs[k * ROWS_PER_PARQUET : (k + 1) * ROWS_PER_PARQUET]
        pq.write_table(pa.table({"text": part, "id": list(range(len(part)))}), root / f"part{k}.parquet")
    lines = [json.dumps({"text": d, "url": "https://example.org"}) for d in docs[2 * ROWS_PER_PARQUET :]]
    (root / "part2.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(root / "*"), docs


def _source(pattern: str, num_proc: int = 1) -> FineWebSource:
    return FineWebSource(
        files=pattern, val_fraction=VAL_FRACTION, shard_tokens=SHARD_TOKENS, num_proc=num_proc
    )


def _decode_docs(tokens: np.ndarray) -> list[str]:
    """Documents from a token array in which every document ends with EOT."""
    ids = tokens.tolist()
    assert ids and ids[-1] == EOT_ID, "the last document must end with <|endoftext|>"
    enc = gpt2_encoding()
    docs, start = [], 0
    for i, token in enumerate(ids):
        if token == EOT_ID:
            docs.append(enc.decode(ids[start:i]))
            start = i + 1
    return docs


def _split_of(doc: str) -> str:
    return "val" if unit_interval(doc) < VAL_FRACTION else "train"


def _shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*_[0-9]*.bin"))}


# --- shards ------------------------------------------------------------------------------------


def test_shards_decode_to_the_documents_with_eot_after_each(corpus, tmp_path) -> None:
    pattern, docs = corpus
    folder = _source(pattern, num_proc=2).prepare(tmp_path / "cache")  # the multiprocess path
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert manifest["complete"] and len(manifest["shards"]) >= 4

    # The shards' document ranges tile the stream: every document once, in order.
    ranges = [shard["documents"] for shard in manifest["shards"]]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(docs)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    for shard in manifest["shards"]:
        start, end = shard["documents"]
        for split in ("train", "val"):
            path = folder / shard["files"][split]["file"]
            expected = [d for d in docs[start:end] if _split_of(d) == split]
            tokens = np.fromfile(path, dtype=np.uint16)
            assert (_decode_docs(tokens) if len(tokens) else []) == expected
            assert shard["files"][split]["documents"] == len(expected)
            assert shard["files"][split]["tokens"] == len(tokens)
        assert (
            shard is manifest["shards"][-1]
            or sum(f["tokens"] for f in shard["files"].values()) >= SHARD_TOKENS
        )

    # meta.json lists the shards per split; load_split reads them as one array.
    meta = read_meta(folder)
    for split in ("train", "val"):
        tokens = load_split(folder, split)
        assert isinstance(tokens, ShardedTokens) and len(tokens) == meta["splits"][split]["tokens"]
        assert _decode_docs(tokens[0 : len(tokens)]) == [d for d in docs if _split_of(d) == split]
    assert 0 < meta["splits"]["val"]["documents"] < meta["splits"]["train"]["documents"]


def test_sharded_tokens_slice_across_files_and_pickle_by_name(tmp_path) -> None:
    parts = [np.arange(0, 5), np.arange(5, 5), np.arange(5, 12), np.arange(12, 20)]
    paths = []
    for i, part in enumerate(parts):
        paths.append(tmp_path / f"s{i}.bin")
        part.astype(np.uint16).tofile(paths[-1])
    tokens = ShardedTokens(paths, [len(p) for p in parts])
    whole = np.arange(20, dtype=np.uint16)
    assert len(tokens) == 20
    for start, stop in [(0, 20), (3, 14), (4, 6), (5, 12), (19, 20), (7, 7)]:
        assert np.array_equal(tokens[start:stop], whole[start:stop]), (start, stop)
    tokens[0:1]  # opens the memmaps
    payload = pickle.dumps(tokens)
    assert len(payload) < 1000 and np.array_equal(pickle.loads(payload)[2:18], whole[2:18])


# --- resume and verification ---------------------------------------------------------------------


class Interrupted(RuntimeError):
    pass


def _stop_after(index: int):
    def hook(record: dict) -> None:
        if record["index"] == index:
            raise Interrupted(f"stopped after shard {index}")

    return hook


def test_interrupted_preparation_resumes_without_loss_or_duplicates(corpus, tmp_path, monkeypatch) -> None:
    pattern, docs = corpus
    reference = _shard_bytes(_source(pattern).prepare(tmp_path / "reference"))

    with pytest.raises(Interrupted):
        _source(pattern).prepare(tmp_path / "cache", on_shard=_stop_after(2))
    folder = _source(pattern).folder(tmp_path / "cache")
    assert not (folder / "meta.json").exists() and not is_valid_cache(folder, splits=FineWebSource.splits)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert [s["index"] for s in manifest["shards"]] == [0, 1, 2] and not manifest["complete"]
    done = manifest["shards"][-1]["documents"][1]
    assert done > ROWS_PER_PARQUET  # the resume skips the whole first parquet file unread
    kept = {p.name: p.stat().st_mtime_ns for p in folder.glob("*_00000[0-2].bin")}
    # Leftovers of a killed writer: a temporary file and a shard file the manifest never named.
    (folder / ".train_000003.bin.999.deadbeef.tmp").write_bytes(b"partial")
    (folder / "train_000009.bin").write_bytes(b"stray")

    tokenized: list[str] = []
    real_encode = fineweb.encode_batch

    def counting_encode(batch: list[str], val_fraction: float, literal_eot_token: bool = False):
        tokenized.extend(batch)
        return real_encode(batch, val_fraction, literal_eot_token)

    monkeypatch.setattr(fineweb, "encode_batch", counting_encode)
    assert _source(pattern).prepare(tmp_path / "cache") == folder
    assert tokenized == docs[done:]  # only the documents no finished shard holds
    assert {p: folder.joinpath(p).stat().st_mtime_ns for p in kept} == kept  # finished shards untouched
    assert _shard_bytes(folder) == reference  # the same shards as an uninterrupted run
    assert not list(folder.glob(".*.tmp")) and is_valid_cache(folder, splits=FineWebSource.splits)


def test_corrupted_shard_is_detected_and_rebuilt(corpus, tmp_path, caplog) -> None:
    pattern, _ = corpus
    folder = _source(pattern).prepare(tmp_path / "cache")
    good = _shard_bytes(folder)
    target = folder / "train_000001.bin"

    # Same size, one bit flipped: only the manifest's sha256 can tell.
    flipped = bytearray(good[target.name])
    flipped[10] ^= 1
    target.write_bytes(bytes(flipped))
    assert is_valid_cache(folder, check_hash=False, splits=FineWebSource.splits)
    assert not is_valid_cache(folder, splits=FineWebSource.splits)
    with caplog.at_level("WARNING", logger="src.data.fineweb"):
        _source(pattern).prepare(tmp_path / "cache")
    assert "shard 1 does not match" in caplog.text
    assert _shard_bytes(folder) == good

    # A truncated shard is refused by the loader before training reads it.
    target.write_bytes(good[target.name][:100])
    with pytest.raises(ValueError, match="does not match"):
        load_split(folder, "train")


# --- the hub path --------------------------------------------------------------------------------


class FakeStream:
    """What `datasets.load_dataset(..., streaming=True)` returns: rows, and a lazy `skip`."""

    def __init__(self, docs: list[str], log: list) -> None:
        self.docs, self.log = docs, log

    def skip(self, n: int) -> FakeStream:
        self.log.append(("skip", n))
        return FakeStream(self.docs[n:], self.log)

    def __iter__(self):
        return iter({"text": d, "id": i} for i, d in enumerate(self.docs))


def test_hub_stream_is_read_lazily_and_skipped_on_resume(monkeypatch, tmp_path) -> None:
    docs, calls = _documents(), []

    def load_dataset(path: str, **kwargs):
        calls.append((path, kwargs))
        return FakeStream(docs, calls)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    source = build_source({"source": "fineweb", "val_fraction": VAL_FRACTION, "shard_tokens": SHARD_TOKENS})
    assert source.cache_key == f"fineweb-HuggingFaceFW_fineweb-sample-10BT-hash1-eotafter-val{VAL_FRACTION}"
    with pytest.raises(Interrupted):
        source.prepare(tmp_path, on_shard=_stop_after(1))
    assert calls == [("HuggingFaceFW/fineweb", {"name": "sample-10BT", "split": "train", "streaming": True})]
    folder = source.prepare(tmp_path)
    done = json.loads((folder / MANIFEST_FILE).read_text())["shards"][1]["documents"][1]
    assert calls[1:] == [calls[0], ("skip", done)]
    assert _decode_docs(load_split(folder, "val")[:]) == [d for d in docs if _split_of(d) == "val"]


def test_hub_without_datasets_says_what_to_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"^data=fineweb: .*`fineweb` extra.*pip install -e '\.\[fineweb\]'.*data\.files"):
        FineWebSource().prepare(tmp_path)


# --- config, DataModule and CLI ----------------------------------------------------------------


def test_datamodule_scores_the_test_window_inside_val(corpus, tmp_path) -> None:
    pattern, _ = corpus
    data_cfg = {
        "source": "fineweb",
        "files": pattern,
        "val_fraction": VAL_FRACTION,
        "shard_tokens": SHARD_TOKENS,
        "cache_dir": str(tmp_path / "cache"),
        "val_max_windows": 4,
        "test_split": "val",
        "test_offset": 4 * 8 + 1,  # right after the validation windows
        "test_max_windows": 10,
    }
    dm = build_datamodule(
        data_cfg, context_length=8, micro_batch_size=4, global_batch_size=4, max_steps=2, seed=0
    )
    dm.prepare_data()
    dm.setup("fit")
    assert set(dm.num_tokens) == {"train", "val"}
    val = dm.tokens["val"]
    test_x = np.concatenate([x.numpy() for x, _ in dm.test_dataloader()])
    assert (
        test_x.shape == (10, 8)
        and np.array_equal(test_x[0], val[33:41])
        and np.array_equal(test_x[9], val[105:113])
    )
    assert sum(len(x) for x, _ in dm.val_dataloader()) == 4
    assert [len(x) for x, _ in dm.train_dataloader()] == [4, 4]

    overlapping = build_datamodule(
        {**data_cfg, "test_offset": 8},
        context_length=8,
        micro_batch_size=4,
        global_batch_size=4,
        max_steps=2,
        seed=0,
    )
    with pytest.raises(ValueError, match="overlaps the validation windows"):
        overlapping.setup("fit")
    beyond = build_datamodule(
        {**data_cfg, "test_offset": 10**9},
        context_length=8,
        micro_batch_size=4,
        global_batch_size=4,
        max_steps=2,
        seed=0,
    )
    with pytest.raises(ValueError, match=r"data\.test_offset=1000000000 leaves no test window"):
        beyond.setup("fit")


def test_config_builds_the_hub_source_and_rejects_bad_values(tmp_path) -> None:
    cfg = compose(["data=fineweb"]).data
    source = build_source(cfg)
    assert isinstance(source, FineWebSource) and source.files is None
    assert (source.dataset, source.subset, source.val_fraction) == (
        "HuggingFaceFW/fineweb",
        "sample-10BT",
        0.01,
    )
    assert source.shard_tokens == 100_000_000
    with pytest.raises(ValueError, match=r"data\.val_fraction"):
        FineWebSource(val_fraction=1.5)
    with pytest.raises(FileNotFoundError, match=r"data\.files"):
        FineWebSource(files=str(tmp_path / "none" / "*.parquet"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"neither \.parquet nor \.jsonl"):
        FineWebSource(files=str(tmp_path / "*"))


def test_cli_prepares_with_the_training_config(corpus, tmp_path, capsys) -> None:
    """`python -m src.data fineweb ...` fills the folder a training job with the same overrides reads,
    and prints each split's tokens, share, documents and shards as that folder holds them."""
    pattern, _ = corpus
    overrides = [f"data.files={pattern}", f"paths.cache_dir={tmp_path / 'cache'}", f"data.shard_tokens={SHARD_TOKENS}", "data.num_proc=1"]
    data_main(["fineweb", *overrides])
    lines = capsys.readouterr().out.splitlines()
    cfg = compose(["data=fineweb", *overrides]).data
    folder = build_source(cfg).folder(cfg.cache_dir)  # where training reads
    assert lines[-1] == f"cache: {folder}" and is_valid_cache(folder)
    splits = read_meta(folder)["splits"]
    assert [line.split()[0] for line in lines[:-1]] == list(splits)
    for line, (split, entry) in zip(lines, splits.items(), strict=False):
        count, _, share, docs, _, shards, _ = line.removeprefix(split).split()
        assert int(count.replace(",", "")) == len(load_split(folder, split)) > 0, line
        assert float(share.rstrip("%")) == pytest.approx(100 * entry["tokens"] / sum(e["tokens"] for e in splits.values()), abs=0.05)
        assert (int(docs), int(shards)) == (entry["documents"], len(entry["shards"])) and entry["documents"] > 0, line
