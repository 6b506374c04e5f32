"""The study's tokens as choices: a literal end-of-text read as the token (`data.literal_eot=token`), the
split by row order (`data.split_by=row_order`), and its own token files read as they are
(`data=safetensors`). Each off by default, out of the fingerprint at its default, an MLflow param."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from src.core.paths import ConfigError, compose
from src.data.base import build_source
from src.data.cache import encode_documents, load_split
from src.data.datamodule import build_datamodule
from src.data.fineweb import FineWebSource, first_val_row
from src.data.tokenizer import EOT_ID, gpt2_encoding
from src.tracking.identity import ADDED_LATER, Identity, fingerprint

LITERAL = "Before the break.<|endoftext|>After it."
# The study's prepare_datasets.py: encode with allowed_special={'<|endoftext|>'}, then an EOT appended.
STUDYS_IDS = [8421, 262, 2270, 13, EOT_ID, 3260, 340, 13, EOT_ID]
ORDINARY_IDS = [8421, 262, 2270, 29847, 91, 437, 1659, 5239, 91, 29, 3260, 340, 13, EOT_ID]  # the literal as text


def test_a_literal_end_of_text_is_the_token_the_studys_way() -> None:
    (theirs,) = encode_documents([LITERAL], eot_after=True, literal_eot_token=True)
    (ours,) = encode_documents([LITERAL], eot_after=True)
    assert theirs.tolist() == STUDYS_IDS and len(theirs) == 9  # the study's count
    assert ours.tolist() == ORDINARY_IDS and len(ours) == 14  # the default: its seven characters' tokens, unchanged


# --- the split by row order ------------------------------------------------------------------------

ROWS = 250  # 99% of 250 is 247.5: `datasets`' closest rounding (round half to even) puts the cut at 248, int() at 247


def _corpus(root: Path) -> tuple[str, list[str]]:
    """Two parquet files and one jsonl file whose names sort in the rows' order; a literal EOT in one document."""
    docs = [f"Row {i}: some text of row {i}." * (1 + i % 3) for i in range(ROWS)]
    docs[3] = LITERAL
    root.mkdir()
    pq.write_table(pa.table({"text": docs[:100]}), root / "000_00000.parquet")
    pq.write_table(pa.table({"text": docs[100:200]}), root / "000_00001.parquet")
    (root / "000_00002.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[200:]), encoding="utf-8")
    return str(root / "*"), docs


def _studys_tokens(docs: list[str]) -> list[int]:
    """prepare_datasets.py's tokens of a split: each document encoded with the EOT allowed, then an EOT."""
    enc = gpt2_encoding()
    return [t for ids in enc.encode_batch(docs, allowed_special={"<|endoftext|>"}) for t in (*ids, EOT_ID)]


def test_the_row_order_split_is_the_studys_train_and_validation(tmp_path: Path) -> None:
    pattern, docs = _corpus(tmp_path / "fineweb")
    assert first_val_row(ROWS, 99) == 248
    source = FineWebSource(files=pattern, split_by="row_order", literal_eot="token", shard_tokens=3000, num_proc=2)
    folder = source.prepare(tmp_path / "cache")
    train, val = (np.asarray(load_split(folder, split)[:]).tolist() for split in ("train", "val"))
    assert train == _studys_tokens(docs[:248])  # train[:99%]: the rows in file order, across shards and files
    assert val == _studys_tokens(docs[248:])  # train[99%:]: the last two rows
    # The hash split of the same files sends other documents to val, and reads the literal as text.
    hashed = FineWebSource(files=pattern, shard_tokens=3000, num_proc=1)
    assert np.asarray(load_split(hashed.prepare(tmp_path / "cache"), "val")[:]).tolist() != val
    assert hashed.cache_key != source.cache_key


def test_the_default_cache_keys_are_those_of_the_caches_made_before() -> None:
    # A cache prepared before the choices is found again: 10B tokens are not tokenized twice.
    assert FineWebSource().cache_key == "fineweb-HuggingFaceFW_fineweb-sample-10BT-hash1-eotafter-val0.01"
    assert FineWebSource(literal_eot="token").cache_key == "fineweb-HuggingFaceFW_fineweb-sample-10BT-hash1-eotafter-eottoken-val0.01"


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"split_by": "rows"}, r"^data\.split_by: 'rows' is not one of the valid choices: hash, row_order$"),
        ({"literal_eot": "special"}, r"^data\.literal_eot: 'special' is not one of the valid choices: text, token$"),
        ({"split_by": "row_order"}, r"^data\.split_by=row_order: splits the rows of data\.files in file order, .*set data\.files"),
        ({"split_by": "row_order", "files": "HERE", "val_fraction": 0.015}, r"^data\.val_fraction=0\.015: .*whole percents only"),
    ],
)
def test_a_bad_choice_is_one_line_naming_its_field(tmp_path: Path, fields: dict[str, object], line: str) -> None:
    pattern, _ = _corpus(tmp_path / "fineweb")
    data = {**dict(compose(["data=fineweb"]).data), **{k: pattern if v == "HERE" else v for k, v in fields.items()}}
    with pytest.raises(ConfigError, match=line):
        build_source(data)


def test_the_defaults_keep_recorded_fingerprints_and_each_choice_is_a_param() -> None:
    assert (ADDED_LATER["data.split_by"], ADDED_LATER["data.literal_eot"]) == ("hash", "text")
    assert fingerprint(compose(["data=fineweb", "model.init=gpt2"])) == "2ced1e0ef8e45578"  # recorded before the keys
    base = Identity.of(compose(["data=fineweb"]))
    for override in ("data.split_by=row_order", "data.literal_eot=token"):
        other = Identity.of(compose(["data=fineweb", override]))
        key, _, value = override.partition("=")
        assert other.fingerprint != base.fingerprint and other.params[key] == value and base.params[key] == ADDED_LATER[key]


# --- the study's token files -----------------------------------------------------------------------


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """A safetensors file by its published layout: an 8-byte little-endian header length, the JSON header
    (dtype, shape, data offsets per tensor, and a `__metadata__` entry), then the data, little-endian."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data, offset = b"", 0
    for name, (dtype, array) in tensors.items():
        raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        data, offset = data + raw, offset + len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads its header to 8 bytes with spaces
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def _token_folder(root: Path, train: np.ndarray, val: np.ndarray) -> Path:
    root.mkdir()
    write_safetensors(root / "train.safetensors", {"tokens": ("U16", train)})
    write_safetensors(root / "validation.safetensors", {"tokens": ("U16", val)})
    return root


def test_the_studys_token_files_train_and_test_on_exactly_their_tokens(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    train, val = (rng.integers(0, 50257, n).astype(np.uint16) for n in (5000, 3000))
    train[[99, 4999]] = val[[10, 2999]] = EOT_ID
    folder = _token_folder(tmp_path / "tokens", train, val)
    cfg = compose([
        "data=safetensors", f"data.folder={folder}", f"paths.cache_dir={tmp_path / 'cache'}", "data.test_offset=1000",
        "data.test_max_windows=4", "data.val_max_windows=2", "data.order=in_order", "model.context_length=32",
        "optim.micro_batch_size=2", "optim.max_steps=3",
    ])  # fmt: skip
    dm = build_datamodule(cfg.data, context_length=32, micro_batch_size=2, global_batch_size=2, max_steps=3, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    assert np.array_equal(dm.tokens["train"][:], train) and np.array_equal(dm.tokens["val"][:], val)
    # in_order: the study's consecutive windows from its first train token
    x, y = next(iter(dm.train_dataloader()))
    assert x.tolist() == [train[0:32].tolist(), train[32:64].tolist()] and y[0].tolist() == train[1:33].tolist()
    x, _ = next(iter(dm.test_dataloader()))
    assert x[0].tolist() == val[1000:1032].tolist()  # the test window: validation.safetensors from data.test_offset
    meta = json.loads((dm.folder / "meta.json").read_text())
    assert meta["splits"]["train"]["documents"] == 2 and meta["splits"]["val"]["documents"] == 2


@pytest.mark.parametrize(
    ("train", "line"),
    [
        (None, r"has no train\.safetensors \(the study's token folder holds train\.safetensors and validation\.safetensors\)"),
        ({"ids": ("U16", np.arange(40, dtype=np.uint16))}, r"train\.safetensors holds no tensor 'tokens' \(it holds \['ids'\]\)"),
        ({"tokens": ("I32", np.arange(40, dtype=np.int32))}, r"train\.safetensors holds 'tokens' as I32 of shape \[40\]"),
        ({"tokens": ("U16", np.full(40, 60000, dtype=np.uint16))}, r"train\.safetensors holds token id 60000, beyond GPT-2's 50257"),
    ],
)
def test_a_token_folder_not_in_the_studys_format_is_refused_naming_data_folder(
    tmp_path: Path, train: dict[str, tuple[str, np.ndarray]] | None, line: str
) -> None:
    root = tmp_path / "tokens"
    root.mkdir()
    write_safetensors(root / "validation.safetensors", {"tokens": ("U16", np.arange(40, dtype=np.uint16))})
    if train is not None:
        write_safetensors(root / "train.safetensors", train)
    with pytest.raises(ConfigError, match=r"^data\.folder: .*" + line):
        build_source({"source": "safetensors", "folder": str(root)}).prepare(tmp_path / "cache")
