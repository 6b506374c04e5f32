"""Bad data input fails while the data is prepared, before anything is recorded: one line, a
`ConfigError` naming the field (and the file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_train

from src.core.paths import ConfigError, compose
from src.data.__main__ import main as data_main
from src.data.base import NoFilesMatched
from src.data.datamodule import build_datamodule
from src.data.fineweb import FineWebSource
from src.data.text_files import TextFilesSource

FRACTIONS = {"val_fraction": 0.2, "test_fraction": 0.2}
LONG_WORDS = 60  # a long document: ~120 tokens, several windows of 16 or 32


def _corpus_with_short_split(root: Path, short: str) -> str:
    """A .jsonl corpus whose `short` split holds one 2-word document and every other split one long
    document; returns its glob. Documents are picked by the split their text hashes to."""
    root.mkdir(parents=True, exist_ok=True)
    probe = root / "probe.txt"
    probe.write_text("probe", encoding="utf-8")
    splitter = TextFilesSource(str(probe), **FRACTIONS)
    probe.unlink()
    chosen: dict[str, str] = {}
    for i in range(10_000):
        short_doc, long_doc = f"tiny {i}", f"Document {i} " + "words and more words " * LONG_WORDS
        if splitter.split_of(short_doc) == short:
            chosen.setdefault(short, short_doc)
        if (split := splitter.split_of(long_doc)) != short:
            chosen.setdefault(split, long_doc)
        if len(chosen) == 3:
            break
    lines = [json.dumps({"text": doc}) for doc in chosen.values()]
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(root / "*.jsonl")


def _data_cfg(paths: str, cache_dir: Path, **fields) -> dict:
    return {"source": "text_files", "paths": paths, "cache_dir": str(cache_dir), **FRACTIONS, **fields}


def _datamodule(data_cfg: dict, context_length: int = 16):
    return build_datamodule(
        data_cfg, context_length=context_length, micro_batch_size=2, global_batch_size=2, max_steps=2, seed=0
    )


# --- a split too small for one window ----------------------------------------------------------


@pytest.mark.parametrize("short", ["train", "val", "test"])
def test_split_smaller_than_one_window_fails_in_prepare_data(short: str, tmp_path: Path) -> None:
    dm = _datamodule(_data_cfg(_corpus_with_short_split(tmp_path / "corpus", short), tmp_path / "cache"))
    with pytest.raises(ConfigError) as err:
        dm.prepare_data()
    message = str(err.value)
    assert f"split '{short}' has " in message and "fewer than context_length + 1 = 17" in message
    assert "seq_len=16" in message and "\n" not in message


# --- window caps ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["val_max_windows", "test_max_windows"])
@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_window_caps_below_one_are_refused(field: str, value, tmp_path: Path) -> None:
    glob = _corpus_with_short_split(tmp_path / "corpus", "none")  # every split long
    with pytest.raises(ConfigError, match=rf"data\.{field} must be an integer >= 1 or null .*got {value!r}"):
        _datamodule(_data_cfg(glob, tmp_path / "cache", **{field: value}))
    assert not (tmp_path / "cache").exists()  # refused before anything is tokenized


def test_test_split_must_be_a_split_of_the_source() -> None:
    cfg = {"source": "fineweb", "cache_dir": "/unused", "test_split": "test"}
    with pytest.raises(ConfigError, match=r"data\.test_split='test'; valid choices: train, val"):
        _datamodule(cfg)


# --- the corpus itself -----------------------------------------------------------------------------


def test_empty_corpus_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "blank.jsonl").write_text("\n\n", encoding="utf-8")
    source = TextFilesSource(str(tmp_path / "*"), **FRACTIONS)
    with pytest.raises(ConfigError, match=r"^data\.paths: the corpus is empty: 2 file\(s\) .*empty\.txt"):
        source.prepare(tmp_path / "cache")


def test_non_utf8_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("plain text " * 50, encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("first line\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        TextFilesSource(str(tmp_path / "*.txt"), **FRACTIONS).prepare(tmp_path / "cache")
    message = str(err.value)
    assert message.startswith(f"data.paths: {tmp_path / 'latin1.txt'} is not UTF-8 text (line 2, byte 14")
    assert "\n" not in message

    lines = ['{"text": "fine"}', '{"text": "also fine"}', '{"text": "caf\xe9"}']
    (tmp_path / "docs.jsonl").write_bytes("\n".join(lines).encode("latin-1"))
    with pytest.raises(
        ConfigError, match=rf"^data\.files: {tmp_path / 'docs.jsonl'} is not UTF-8 text \(line 3,"
    ):
        FineWebSource(files=str(tmp_path / "*.jsonl")).prepare(tmp_path / "cache")


def test_glob_matching_nothing_stays_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data\.paths .* matched no files") as err:
        TextFilesSource(str(tmp_path / "none" / "*.txt"))
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, NoFilesMatched)


def test_a_folder_given_as_the_corpus_says_it_is_a_folder(tmp_path: Path) -> None:
    """Before: a `data.paths` naming a folder of .txt files said only "matched no files"."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("plain text " * 50, encoding="utf-8")
    with pytest.raises(NoFilesMatched) as err:
        TextFilesSource(str(tmp_path / "corpus"))
    assert str(err.value) == (
        f"data.paths ['{tmp_path / 'corpus'}'] matched only folders ({tmp_path / 'corpus'}), no files: "
        f"name the files, or glob inside the folder (e.g. {tmp_path / 'corpus' / '**' / '*.txt'})"
    )


def test_fineweb_empty_stream_and_no_val_document(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^data\.files: the document stream of .* is empty"):
        FineWebSource(files=str(tmp_path / "empty.jsonl")).prepare(tmp_path / "cache")
    (tmp_path / "one.jsonl").write_text(json.dumps({"text": "one document"}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^data\.val_fraction=1e-09: no document went to val"):
        FineWebSource(files=str(tmp_path / "one.jsonl"), val_fraction=1e-9).prepare(tmp_path / "cache")


# --- through training and the data command --------------------------------------------------------


def _bad_corpus(kind: str, root: Path) -> list[str]:
    """Overrides that point training at a corpus with one problem."""
    root.mkdir(parents=True, exist_ok=True)
    if kind == "short_val":
        glob = _corpus_with_short_split(root, "val")
        return ["data=text_files", f"data.paths={glob}", *(f"data.{k}={v}" for k, v in FRACTIONS.items())]
    if kind == "empty":
        (root / "empty.txt").write_text("", encoding="utf-8")
        return ["data=text_files", f"data.paths={root / '*.txt'}"]
    if kind == "not_utf8":
        (root / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
        return ["data=text_files", f"data.paths={root / '*.txt'}"]
    assert kind == "no_test_windows"
    return ["data.test_max_windows=0"]


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("short_val", "split 'val' has "),
        ("empty", "data.paths: the corpus is empty"),
        ("not_utf8", "bad.txt is not UTF-8 text (line 1, byte 0"),
        ("no_test_windows", "data.test_max_windows must be an integer >= 1"),
    ],
)
@pytest.mark.fresh_store  # asserts that no store file is written
def test_training_refuses_bad_data_before_recording(
    kind: str, expected: str, tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    from src.train import train

    cfg = compose(
        [*tiny_overrides, *_bad_corpus(kind, tmp_path / "corpus"), f"paths.cache_dir={tmp_path / 'c'}"]
    )
    with pytest.raises(ConfigError) as err:
        train(cfg)
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert not Path(store["db"]).exists()  # no MLflow run was opened


@pytest.mark.fresh_store  # asserts that no store file is written
def test_training_cli_prints_one_line(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    # The entry point in this process (helpers.run_train): its exit status and lines, without a second
    # interpreter importing the stack; tests/test_train.py runs a config error's line as a process.
    proc = run_train(*tiny_overrides, *_bad_corpus("not_utf8", tmp_path / "corpus"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("config error: data.paths: ") and "bad.txt is not UTF-8 text" in lines[-1]
    assert not Path(store["db"]).exists()


def test_data_command_reports_config_errors_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _bad_corpus("empty", tmp_path / "corpus")
    for args, start in [
        (["shakspeare"], "config error: data: no option 'shakspeare' (conf/data/); valid choices: fineweb, safetensors, shakespeare, text_files"),  # as data=shakspeare says it
        (["data.foo=1"], "config error: data.foo: no such key (data's keys: source, cache_dir, "),
        (["text_files", *bad[1:], f"paths.cache_dir={tmp_path / 'cache'}"], "config error: data.paths: the corpus is empty"),
    ]:
        assert data_main(args) == 2  # src.core.cli.USAGE
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(start), line
