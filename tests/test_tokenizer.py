"""The offline GPT-2 tokenizer: known ids, vocabulary, lossless round trip, ranks-file integrity."""

from __future__ import annotations

from importlib import resources

import pytest
from tiktoken.load import load_tiktoken_bpe

from src.data.shakespeare import markdown_to_text, plays
from src.data.tokenizer import EOT_ID, EOT_TOKEN, RANKS_FILE, RANKS_SHA256, VOCAB_SIZE, gpt2_encoding


def test_known_ids() -> None:
    enc = gpt2_encoding()
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.n_vocab == VOCAB_SIZE == 50257
    assert enc.eot_token == EOT_ID == 50256
    assert enc.encode(EOT_TOKEN, allowed_special={EOT_TOKEN}) == [EOT_ID]


def test_round_trip_of_whole_corpus() -> None:
    enc = gpt2_encoding()
    text = "".join(markdown_to_text(markdown) for markdown in plays().values())
    ids = enc.encode_ordinary(text)
    assert max(ids) < 2**16  # the cache stores uint16
    assert enc.decode(ids) == text


def test_ranks_file_with_wrong_hash_fails(tmp_path) -> None:
    original = (resources.files("src") / "assets" / RANKS_FILE).read_bytes()
    tampered = tmp_path / RANKS_FILE
    tampered.write_bytes(original.replace(b"\n", b"\n\n", 1))  # one extra byte
    with pytest.raises(ValueError, match="[Hh]ash"):
        load_tiktoken_bpe(str(tampered), expected_hash=RANKS_SHA256)
