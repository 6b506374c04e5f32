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
  slice of the vocabulary and scaled (HEAD_SLICE);
- each norm at (max(rows, NORM_ROWS), d), its time scaled to `rows` tokens, counted 2L + 1 times (two
  per block, one final).

A norm's step is then L blocks + head + its 2L + 1 calls; its share is norm ÷ step, and a saving of b
against a (norm_a - norm_b) is per token too. The row count sets how many sequences a call holds, and
at ROWS the parts run at their rate: tests/test_shares.py times two row counts and finds the same
shares. What a training step adds is left out, each O(d) per token or O(parameters) per step spread
over its 8 × 1,024 tokens: the embedding lookup and AdamW (under 0.1% of a step), so a share here is,
if anything, a little high.

One round times every size once, its parts in turn, the sizes' order rotating, on the thread's CPU
clock on a CPU (src.bench.kernels.clock): a burst of another process's load lands on a round's parts
alike, and a trend is read per round (src.report.judge.study_effects).

`norm_share_rounds` is the one function: the sweep's speed check calls it (src.bench.variants
`--share-sizes`), and anything else that needs a norm's share of a step at a size can.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
# A norm is timed on more tokens, and its time scaled to ROWS': at width 128 a call on 128 rows is mostly
# its fixed per-call cost (dispatch, autograd), which a real step's thousands of rows spread thin.
NORM_ROWS = 2048
NORM_SAMPLE_S = 1e-3  # a norm's sample repeats its call until it takes about this long (a small width is microseconds)
MAX_REPEATS = 64


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


def head_call(shape: Shape, rows: int, device: torch.device, context: Context) -> Callable[[], None]:
    """The output head and its loss as a step runs them (logits, cross-entropy, backward) on
    1/HEAD_SLICE of the vocabulary: its time × HEAD_SLICE is the head's."""
    vocab = max(1, shape.vocab // HEAD_SLICE)
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
    shapes = [s if isinstance(s, Shape) else Shape.of(s) for s in sizes]
    blocks = {s.name: block_call(s, rows, device, context) for s in shapes}
    heads = {s.name: head_call(s, rows, device, context) for s in shapes}
    norm_rows = max(rows, NORM_ROWS)
    calls = {(n, s.name): norm_call(b, s, norm_rows, device, context) for n, b in norms.items() for s in shapes}
    for fn in [*blocks.values(), *heads.values(), *calls.values()]:
        fn()  # warm-up: allocations, first-call dispatch
    synchronize(device)
    repeats = {key: int(min(MAX_REPEATS, max(1, math.ceil(NORM_SAMPLE_S / max(_timed(fn, device, 1), 1e-7))))) for key, fn in calls.items()}
    samples: dict[str, dict[str, list[float]]] = {n: {s.name: [] for s in shapes} for n in norms}
    norm_s: dict[str, dict[str, list[float]]] = {n: {s.name: [] for s in shapes} for n in norms}
    rest_s: dict[str, list[float]] = {s.name: [] for s in shapes}
    parts_s: dict[str, dict[str, list[float]]] = {s.name: {"block": [], "head": []} for s in shapes}
    started, said, load_before = time.perf_counter(), time.perf_counter(), load()
    for r in range(rounds):
        order = shapes[r % len(shapes):] + shapes[: r % len(shapes)]
        for s in order:
            block, head = _timed(blocks[s.name], device, 1), _timed(heads[s.name], device, 1) * s.vocab / max(1, s.vocab // HEAD_SLICE)
            parts_s[s.name]["block"].append(block)
            parts_s[s.name]["head"].append(head)
            other = s.layers * block + head
            rest_s[s.name].append(other)
            for n in norms:
                per_call = _timed(calls[(n, s.name)], device, repeats[(n, s.name)]) / repeats[(n, s.name)] * rows / norm_rows
                norm = per_call * s.norms
                norm_s[n][s.name].append(norm)
                samples[n][s.name].append(norm / (norm + other))
        if (now := time.perf_counter()) - said >= PROGRESS_S:
            said = now
            say(KERNELS, f"norm share: {r + 1} of {rounds} rounds at {', '.join(s.name for s in shapes)}, {now - started:.0f} s")
    return {
        "sizes": [s.name for s in shapes],
        "rows": rows,
        "seq": SEQ,
        "head_slice": HEAD_SLICE,
        "norm_rows": norm_rows,
        "rounds": rounds,
        "samples": samples,  # norm -> size -> its share of a step, one per round
        "norm_s": norm_s,  # norm -> size -> its seconds per `rows` tokens of a step, one per round
        "rest_s": rest_s,  # size -> the rest of the step's seconds per `rows` tokens, one per round
        "parts_s": parts_s,  # size -> one block's and the head's seconds per `rows` tokens, one per round
        "multiply_adds": {s.name: s.multiply_adds(min(SEQ, s.context, rows)) for s in shapes},  # per token, forward
        "denominator": f"L whole blocks (identity norms) and the head with its loss, on sequences of up to {SEQ} tokens (src/bench/shares.py)",
        "seconds": time.perf_counter() - started,
        "load": {"before": load_before, "after": load()},
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "clock": "thread_cpu" if clock(device) is time.thread_time else "wall",
    }
