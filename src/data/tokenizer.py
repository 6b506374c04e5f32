"""GPT-2's byte-pair encoding as a tiktoken `Encoding`, built offline from the packaged ranks file.

`tiktoken.get_encoding("gpt2")` downloads its vocabulary on first use; no machine of this project
reaches the internet at run time, so the ranks ship inside the package (`src/assets/`) and are
checked against the sha256 that tiktoken itself expects for `r50k_base`.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext.openai_public import r50k_pat_str

RANKS_FILE = "r50k_base.tiktoken"
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
EOT_TOKEN = "<|endoftext|>"
EOT_ID = 50256
VOCAB_SIZE = 50257
TOKENIZER_NAME = "gpt2-r50k"


@lru_cache(maxsize=1)
def gpt2_encoding() -> tiktoken.Encoding:
    """The GPT-2 tokenizer: 50,256 BPE tokens plus `<|endoftext|>` = 50256."""
    path = resources.files("src") / "assets" / RANKS_FILE
    with resources.as_file(path) as local:
        # expected_hash makes a truncated or edited ranks file fail loudly instead of mis-tokenizing.
        ranks = load_tiktoken_bpe(str(local), expected_hash=RANKS_SHA256)
    enc = tiktoken.Encoding(
        name=TOKENIZER_NAME,
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={EOT_TOKEN: EOT_ID},
    )
    assert enc.n_vocab == VOCAB_SIZE, enc.n_vocab
    return enc
