"""A norm's share of a step, as the speed check times it per model size (src/bench/shares.py), does
not depend on how many tokens a timed call holds: every part is timed per token at a fixed sequence
length, so the row count only sets how many sequences a call carries."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from src.bench.kernels import cpu_threads
from src.bench.shares import ROWS, Shape, norm_share_rounds
from src.model.norms import NormSpec
from src.stats.inference import trimmed_mean_interval

# Wide enough that a block's matmuls, not its per-op dispatch, are its time; a small vocabulary keeps the head cheap.
SIZES = [Shape("w128", 128, 2, 2, 32, 2048), Shape("w256", 256, 4, 2, 32, 2048)]
NORMS = ("hand_layernorm", "torch_rmsnorm")


def _shares(rows: int) -> dict:
    builders = {n: NormSpec(n, 1e-5, {}).build for n in NORMS}
    with cpu_threads(1):  # as the speed check runs it on the CPU
        return norm_share_rounds(builders, SIZES, 8, torch.device("cpu"), contextlib.nullcontext, rows=rows)


@pytest.mark.slow
@pytest.mark.alone  # it times kernels: beside the suite's other workers a share moves with their load
def test_a_norms_share_is_the_same_at_two_row_counts() -> None:
    """Each norm's share at each size, timed on the check's own tokens a call (ROWS) and on twice them: their
    95% intervals over rounds overlap. The former instrument's 128 rows against 512 read every share here
    apart (hand_layernorm 0.165 [0.160, 0.170] against 0.225 [0.216, 0.234] at width 128), and gpt2_medium's
    14-45% apart: a block's weight-gradient matmuls, whose inner dimension is the token count, had not
    reached their rate."""
    few, many = _shares(ROWS), _shares(2 * ROWS)
    assert few["rows"] == ROWS == 1024 and many["rows"] == 2 * ROWS
    for n in NORMS:
        for s in SIZES:
            a, b = (trimmed_mean_interval(np.asarray(x["samples"][n][s.name])) for x in (few, many))
            assert 0 < a.diff < 1 and 0 < b.diff < 1
            assert a.low <= b.high and b.low <= a.high, (n, s.name, a, b)
    # The parts' seconds are per the call's rows: twice the rows, about twice the time.
    ratio = np.median(many["rest_s"]["w256"]) / np.median(few["rest_s"]["w256"])
    assert 1.5 < ratio < 2.7, ratio


def test_rows_must_be_whole_sequences() -> None:
    with pytest.raises(ValueError, match="rows: a whole number of 32-token sequences at w128, got 48"):
        norm_share_rounds({}, SIZES[:1], 2, torch.device("cpu"), contextlib.nullcontext, rows=48)
