"""A norm's cost at each model size's shapes, against the step it sits in, in interleaved rounds.

The study says a norm's savings (RMSNorm's against LayerNorm's) scale with width and depth, while
their share of a larger model's step (dominated by O(d²) matmuls and O(n²) attention) is modest. That
is a statement over model sizes, and it needs no training: per size (a conf/model option: width d,
heads, layers L, context n, vocabulary V) one round times, forward+backward, on one thread:

- a whole block as the model runs it (src.model.gpt.TransformerBlock: attention through the fused
  causal kernel, the MLP, residual adds, dropout at the option's rate), built with the identity for its
  norms, on `rows` tokens as sequences of min(SEQ, n) tokens (a GPT-2 size: one sequence of its full
  1,024-token context), counted L times: one call of a whole block, not its matmuls apart (matmuls
  timed one by one on 128 rows ran at another rate than a step's, and the share moved with the rows);
- the output head and its loss (d→V, then cross-entropy over V) on the same rows, once, timed on a
  slice of the vocabulary and scaled (head_columns);
- each norm at (max(rows, NORM_ROWS), d), its time scaled to `rows` tokens, counted 2L + 1 times (two
  per block, one final).

A norm's step is then L blocks + head + its 2L + 1 calls; its share is norm ÷ step, and a saving of b
against a (norm_a - norm_b) is per token too. The row count sets how many sequences a call holds, and
at ROWS the parts run at their rate: tests/test_shares.py times two row counts and finds the same
shares. What a training step adds is left out, each O(d) per token or O(parameters) per step spread
over its 8 × 1,024 tokens: the embedding lookup and AdamW (under 0.1% of a step), so a share here is,
if anything, a little high.

One round times every size once, the sizes' order rotating, on the thread's CPU clock on a CPU
(src.bench.kernels.clock): a burst of another process's load lands on a round's parts alike, and a
trend is read per round (src.report.judge.study_effects). Within a size, each part is timed at every
row count back to back (`share_rounds_at_rows` times several in the same rounds), and a norm's sample
is the median of NORM_SAMPLES, taken in turn with the other norms' and row counts': the machine's
speed drifts over a second or so, and what is compared (two row counts' shares, two norms' savings) is
then timed under one state of it.

`norm_share_rounds` is the one function at one row count: the sweep's speed check calls it (src.bench.variants
`--share-sizes`), and anything else that needs a norm's share of a step at a size can.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812  (torch's own name for it)
from torch import nn

from src.bench.common import synchronize
from src.bench.kernels import Context, _timed, clock, load
from src.core.paths import CONF_DIR
from src.core.progress import KERNELS, PROGRESS_S, say

# Tokens per timed call: one sequence of a GPT-2 size's full context. A block's weight gradients are
# matmuls whose inner dimension is the token count, and on one thread their rate kept rising with it:
# gpt2_large's block took 1,890, 908 and 770 µs a token on 128, 512 and 1,024 rows (load 7); tiny widths
# reached their rate by 1,024 rows (tests/test_shares.py). A training step's is 8 × 1,024.
ROWS = 1024
SEQ = 1024  # tokens per sequence of a timed block at most (a size's context if shorter): attention's context
# The head is timed on 1/HEAD_SLICE of the vocabulary and its time scaled by HEAD_SLICE: the logits' columns
# are independent dot products (the matmul's rate is set by its rows and width, not by how many columns),
# and the loss is linear in them; the whole head would be half a round's time (50,257 × d a token).
HEAD_SLICE = 8
# ...but on no fewer columns than this (a small vocabulary's, as tests/test_shares.py's): on 256 columns the
# head ran 8-13% faster a token on 2,048 rows than on 1,024 (its per-row work not yet spread thin), on 1,024
# columns 2-4% (widths 128 and 256, the row counts interleaved, load 7.6-7.8).
HEAD_MIN_COLUMNS = 1024
# A norm is timed on more tokens, and its time scaled to ROWS': at width 128 a call on 128 rows is mostly
# its fixed per-call cost (dispatch, autograd), which a real step's thousands of rows spread thin.
NORM_ROWS = 2048
NORM_SAMPLE_S = 1e-3  # a norm's sample repeats its call until it takes about this long (a small width is microseconds)
MAX_REPEATS = 64
# A round's sample of a norm is the median of this many, each norm and row count in turn. One sample's
# log ratio between two row counts (the same call on the same rows) spread 0.10-0.28 from round to
# round on a quiet AMD EPYC host, whether it took 1 or 5 ms; the median of five, 0.05-0.07
# (tests/test_shares.py's sizes, 80 rounds). A GPT-2 size's norm samples are milliseconds beside its
# block's second.
NORM_SAMPLES = 5


@dataclass(frozen=True)
class Shape:
    """A model size's shapes (conf/model/<name>.yaml)."""

    name: str
    width: int
    heads: int
    layers: int
    context: int
    vocab: int
    drop: float = 0.0

    @classmethod
    def of(cls, name: str) -> Shape:
        from omegaconf import OmegaConf

        m = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
        return cls(name, int(m.emb_dim), int(m.n_heads), int(m.n_layers), int(m.context_length), int(m.vocab_size),
                   float(m.get("drop_rate", 0.0)))  # fmt: skip

    @property
    def norms(self) -> int:
        """Norm calls per token of a step: two per block (pre-norm) and the final one."""
        return 2 * self.layers + 1

    def multiply_adds(self, seq: int) -> dict[str, int]:
        """Multiply-adds per token of a forward pass, by part, at `seq` tokens of causal context:
        the block's four matmuls (12 d² a block), its attention (QKᵀ and AV: a causal query sees
        (seq + 1) / 2 keys on average, 2 d each), the head (d V). docs/claims.md quotes them."""
        d, keys = self.width, (seq + 1) / 2
        return {"matmuls": 12 * d * d * self.layers, "attention": int(2 * d * keys * self.layers), "head": d * self.vocab}


def _fwd_bwd(fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], context: Context,
             params: Sequence[torch.Tensor] = ()) -> Callable[[], None]:  # fmt: skip
    """fn(*inputs) forward and backward under `context`, the first input and `params` needing gradients;
    each call starts with no gradients, as a step's backward after zero_grad does (none to add to)."""
    with context():
        dy = fn(*inputs).detach().clone().normal_()

    def run() -> None:
        for t in (inputs[0], *params):
            t.grad = None
        with context():
            y = fn(*inputs)
        y.backward(dy if y.dim() else None)

    return run


def block_call(shape: Shape, rows: int, device: torch.device, context: Context) -> Callable[[], None]:
    """A whole block of the model at `shape`, its norms the identity, forward and backward on `rows`
    tokens as rows ÷ SEQ sequences of min(SEQ, n) tokens."""
    from src.model.gpt import GPTConfig, TransformerBlock

    seq = min(SEQ, shape.context, rows)  # fewer rows than a context (a test's): one sequence of them
    if rows % seq:
        raise ValueError(f"rows: a whole number of {seq}-token sequences at {shape.name}, got {rows}")
    cfg = GPTConfig(vocab_size=shape.vocab, context_length=shape.context, emb_dim=shape.width, n_heads=shape.heads,
                    n_layers=shape.layers, drop_rate=shape.drop, norm_type="no_norm")  # fmt: skip
    block = TransformerBlock(cfg).to(device).train()
    x = torch.randn(rows // seq, seq, shape.width, device=device, requires_grad=True)
    return _fwd_bwd(block, [x], context, list(block.parameters()))


def head_columns(shape: Shape) -> int:
    """The vocabulary's columns the head is timed on: 1/HEAD_SLICE of them, at least HEAD_MIN_COLUMNS."""
    return min(shape.vocab, max(shape.vocab // HEAD_SLICE, HEAD_MIN_COLUMNS))


def head_call(shape: Shape, rows: int, device: torch.device, context: Context) -> Callable[[], None]:
    """The output head and its loss as a step runs them (logits, cross-entropy, backward) on
    head_columns of the vocabulary: its time × vocab ÷ those columns is the head's."""
    vocab = head_columns(shape)
    head = nn.Linear(shape.width, vocab, bias=False).to(device)
    x = torch.randn(rows, shape.width, device=device, requires_grad=True)
    targets = torch.randint(0, vocab, (rows,), device=device)
    return _fwd_bwd(lambda h: F.cross_entropy(head(h).float(), targets), [x], context, list(head.parameters()))


def norm_call(build: Callable[[int], nn.Module], shape: Shape, rows: int, device: torch.device, context: Context) -> Callable[[], None]:
    """One norm call forward and backward at (rows, width), the norm built at that width (`rows`: NORM_ROWS)."""
    module = build(shape.width).to(device)
    return _fwd_bwd(module, [torch.randn(rows, shape.width, device=device, requires_grad=True)], context, list(module.parameters()))


def norm_share_rounds(
    norms: Mapping[str, Callable[[int], nn.Module]],
    sizes: Sequence[str | Shape],
    rounds: int,
    device: torch.device,
    context: Context,
    rows: int = ROWS,
) -> dict[str, Any]:
    """Per norm (name -> its builder at a width) and model size (conf/model names, or Shapes), in each of `rounds`
    interleaved rounds: its seconds per `rows` tokens of a step (`norm_s`), the rest of that step's
    (`rest_s`: L blocks with the identity, the head and its loss) and its share of the step, norm ÷
    (norm + rest) (`samples`). A saving of b against a is norm_s[a] - norm_s[b] of the same round. The
    CPU caller runs it on one thread (src.bench.kernels.cpu_threads)."""
    return share_rounds_at_rows(norms, sizes, rounds, device, context, (rows,))[rows]


def share_rounds_at_rows(
    norms: Mapping[str, Callable[[int], nn.Module]],
    sizes: Sequence[str | Shape],
    rounds: int,
    device: torch.device,
    context: Context,
    rows: Sequence[int],
) -> dict[int, dict[str, Any]]:
    """`norm_share_rounds` at several row counts in the same rounds: each round times every size at
    every row count, each part at the row counts back to back, their order reversed every other round
    (the sizes' rotating), so a share read at two row counts was read under the machine's same state,
    and a difference between them is the row count's, not the load's (two runs one after the other
    beside CPU hogs read hand_layernorm's share 0.193 [0.188, 0.197] and 0.210 [0.204, 0.217]; timing
    each size's whole round at one row count, then at the other, left a block's time per token 0.13
    apart in log terms from round to round on a quiet AMD EPYC host, part by part 0.06-0.09). Row count
    -> its result."""
    if len(set(rows)) != len(rows) or not rows:
        raise ValueError(f"rows: distinct row counts, at least one, got {list(rows)}")
    shapes = [s if isinstance(s, Shape) else Shape.of(s) for s in sizes]
    settings = {(n, s.name): _Setting.build(norms, s, n, device, context) for n in rows for s in shapes}
    for setting in settings.values():
        setting.warm_up()
    synchronize(device)
    for setting in settings.values():
        setting.count_repeats(device)
    started, said, load_before = time.perf_counter(), time.perf_counter(), load()
    for r in range(rounds):
        order = list(rows) if r % 2 == 0 else list(reversed(rows))
        turn = shapes[r % len(shapes):] + shapes[: r % len(shapes)]
        for s in turn:
            _time_round([settings[(n, s.name)] for n in order], device)
        if (now := time.perf_counter()) - said >= PROGRESS_S:
            said = now
            say(KERNELS, f"norm share: {r + 1} of {rounds} rounds at {', '.join(s.name for s in shapes)}, {now - started:.0f} s")
    seconds, load_after = time.perf_counter() - started, load()
    return {
        n: {
            "sizes": [s.name for s in shapes],
            "rows": n,
            "seq": SEQ,
            "head_columns": {s.name: head_columns(s) for s in shapes},  # of its vocabulary, the head timed on
            "norm_rows": max(n, NORM_ROWS),
            "rounds": rounds,
            **_collected([settings[(n, s.name)] for s in shapes], list(norms)),
            "multiply_adds": {s.name: s.multiply_adds(min(SEQ, s.context, n)) for s in shapes},  # per token, forward
            "denominator": f"L whole blocks (identity norms) and the head with its loss, on sequences of up to {SEQ} tokens (src/bench/shares.py)",
            "seconds": seconds,  # of all the row counts' rounds together
            **({"row_counts": list(rows)} if len(rows) > 1 else {}),  # timed in the same rounds
            "load": {"before": load_before, "after": load_after},
            "threads": torch.get_num_threads() if device.type == "cpu" else None,
            "clock": "thread_cpu" if clock(device) is time.thread_time else "wall",
        }
        for n in rows
    }


@dataclass
class _Setting:
    """One size at one row count: its timed calls and the samples its rounds collect."""

    shape: Shape
    rows: int
    block: Callable[[], None]
    head: Callable[[], None]
    calls: dict[str, Callable[[], None]]  # norm -> its call at (norm_rows, width)
    repeats: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # norm -> its share of a step, one per round
    norm_s: dict[str, list[float]] = field(default_factory=dict)  # norm -> its seconds per `rows` tokens, one per round
    rest_s: list[float] = field(default_factory=list)  # the rest of the step's seconds per `rows` tokens, one per round
    parts_s: dict[str, list[float]] = field(default_factory=lambda: {"block": [], "head": []})

    @classmethod
    def build(cls, norms: Mapping[str, Callable[[int], nn.Module]], shape: Shape, rows: int, device: torch.device,
              context: Context) -> _Setting:  # fmt: skip
        calls = {n: norm_call(b, shape, max(rows, NORM_ROWS), device, context) for n, b in norms.items()}
        return cls(shape, rows, block_call(shape, rows, device, context), head_call(shape, rows, device, context), calls,
                   samples={n: [] for n in norms}, norm_s={n: [] for n in norms})  # fmt: skip

    def warm_up(self) -> None:
        for fn in [self.block, self.head, *self.calls.values()]:
            fn()  # allocations, first-call dispatch

    def count_repeats(self, device: torch.device) -> None:
        """Calls a norm's sample repeats: about NORM_SAMPLE_S of them (a small width's call is microseconds)."""
        self.repeats = {n: int(min(MAX_REPEATS, max(1, math.ceil(NORM_SAMPLE_S / max(_timed(fn, device, 1), 1e-7)))))
                        for n, fn in self.calls.items()}  # fmt: skip

    def record(self, block: float, head: float, norms: Mapping[str, float]) -> None:
        """One round's parts (seconds per `rows` tokens, the head's scaled to the whole vocabulary, each
        norm's to its 2L + 1 calls): a share per norm from this round's parts alone."""
        self.parts_s["block"].append(block)
        self.parts_s["head"].append(head)
        other = self.shape.layers * block + head
        self.rest_s.append(other)
        for n, norm in norms.items():
            self.norm_s[n].append(norm)
            self.samples[n].append(norm / (norm + other))

    def norm_sample(self, name: str, device: torch.device) -> float:
        """One sample of a norm's call, in seconds per `rows` tokens for its 2L + 1 calls."""
        repeats = self.repeats[name]
        return _timed(self.calls[name], device, repeats) / repeats * self.rows / max(self.rows, NORM_ROWS) * self.shape.norms


def _time_round(settings: Sequence[_Setting], device: torch.device) -> None:
    """One round of one size at its row counts (`settings`, in this round's order): the block at each
    row count back to back, then the head, then NORM_SAMPLES passes over every norm at every row
    count, a norm's sample the median of its passes."""
    s = settings[0].shape
    blocks = [_timed(x.block, device, 1) for x in settings]
    heads = [_timed(x.head, device, 1) * s.vocab / head_columns(s) for x in settings]
    names = list(settings[0].calls)
    passes: dict[tuple[int, str], list[float]] = {(i, n): [] for i in range(len(settings)) for n in names}
    for _ in range(NORM_SAMPLES):
        for n in names:
            for i, x in enumerate(settings):
                passes[(i, n)].append(x.norm_sample(n, device))
    for i, x in enumerate(settings):
        x.record(blocks[i], heads[i], {n: statistics.median(passes[(i, n)]) for n in names})


def _collected(settings: Sequence[_Setting], norms: Sequence[str]) -> dict[str, Any]:
    """One row count's samples, keyed as `norm_share_rounds` returns them."""
    return {
        "samples": {n: {x.shape.name: x.samples[n] for x in settings} for n in norms},  # norm -> size -> its share of a step, one per round
        "norm_s": {n: {x.shape.name: x.norm_s[n] for x in settings} for n in norms},  # norm -> size -> its seconds per `rows` tokens, one per round
        "rest_s": {x.shape.name: x.rest_s for x in settings},  # size -> the rest of the step's seconds per `rows` tokens, one per round
        "parts_s": {x.shape.name: x.parts_s for x in settings},  # size -> one block's and the head's seconds per `rows` tokens, one per round
    }
