"""A norm's share of a training step at each model size's shapes, in interleaved rounds.

The study says a norm's savings scale with width and depth, but its share of a larger model's step
(dominated by O(d²) matmuls and O(n²) attention) is small. That is a trend over model sizes, and it
needs no training: per size (a conf/model option: width d, heads, layers L, context n, vocabulary V)
one round times, forward+backward on `rows` tokens at that size's shapes,

- the norm: one call at (NORM_ROWS, d), its time scaled to `rows` tokens, counted 2L + 1 times (two per
  block, one final): on few rows a narrow norm's call is mostly its fixed per-call cost;
- the rest of a step, built from its timed parts: the four matmuls of a block (d→3d, d→d, d→4d, 4d→d)
  and its GELU (rows, 4d), counted L times; causal attention as each query's average work, a query
  block of `rows` against n/2 keys (what a causal query sees on average), counted L times; the output
  head (d→V) once.

Every part is linear in the tokens, so a share measured on `rows` tokens is the share of a step of
any batch: the per-token costs divide, the token count cancels. Left out, each O(d) per token or per
parameter: the embedding lookup, residual adds, dropout (0 in every conf/model option) and the
optimizer step (per parameter, spread over a batch's tokens). They would add to the denominator at
every size alike in kind, so the shares here are upper bounds, and their trend is the matmuls' O(d²)
against the norm's O(d).

One round times every size once, the norms and the rest in turn, the order rotating, on one thread and
its CPU clock on a CPU (src.bench.kernels.clock): a burst of another process's load lands on a round's
sizes alike, and the trend is read per round (src.report.judge.study_effects.share_effect).

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

ROWS = 128  # tokens per timed call: enough rows that a matmul runs at its blocked rate, few enough for seconds a round
# A norm is timed on more tokens, and its time scaled to ROWS': at width 128 a call on 128 rows is mostly
# its fixed per-call cost (dispatch, autograd), which a real step's thousands of rows spread thin. Cheap
# even at gpt2_medium's width (a few ms a call).
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

    @classmethod
    def of(cls, name: str) -> Shape:
        from omegaconf import OmegaConf

        m = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
        return cls(name, int(m.emb_dim), int(m.n_heads), int(m.n_layers), int(m.context_length), int(m.vocab_size))

    @property
    def norms(self) -> int:
        """Norm calls per token of a step: two per block (pre-norm) and the final one."""
        return 2 * self.layers + 1


def _fwd_bwd(fn: Callable[..., torch.Tensor], *shapes: tuple[int, ...], device: torch.device,
             dtype: torch.dtype = torch.float32) -> Callable[[], None]:  # fmt: skip
    """fn(*inputs) forward and backward, its inputs (all needing gradients) made once here."""
    inputs = [torch.randn(s, device=device, dtype=dtype, requires_grad=True) for s in shapes]
    dy = fn(*inputs).detach().clone().normal_()

    def run() -> None:
        for x in inputs:
            x.grad = None
        fn(*inputs).backward(dy)

    return run


def rest_of_step(shape: Shape, rows: int, device: torch.device, context: Context) -> dict[str, tuple[Callable[[], None], int]]:
    """The step's parts other than the norm: name -> (forward+backward on `rows` tokens, calls per step)."""
    d, hd, keys = shape.width, shape.width // shape.heads, max(1, shape.context // 2)

    def linear(n_in: int, n_out: int) -> Callable[[], None]:
        return _fwd_bwd(lambda x, w: F.linear(x, w), (rows, n_in), (n_out, n_in), device=device)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

    parts = {
        "qkv": (linear(d, 3 * d), shape.layers),
        "attn_out": (linear(d, d), shape.layers),
        "mlp_up": (linear(d, 4 * d), shape.layers),
        "gelu": (_fwd_bwd(lambda x: F.gelu(x, approximate="tanh"), (rows, 4 * d), device=device), shape.layers),
        "mlp_down": (linear(4 * d, d), shape.layers),
        "attention": (_fwd_bwd(attention, (1, shape.heads, rows, hd), (1, shape.heads, keys, hd), (1, shape.heads, keys, hd),
                               device=device), shape.layers),  # fmt: skip
        "head": (linear(d, shape.vocab), 1),
    }
    return {name: (_in(fn, context), calls) for name, (fn, calls) in parts.items()}


def _in(fn: Callable[[], None], context: Context) -> Callable[[], None]:
    def run() -> None:
        with context():
            fn()

    return run


def norm_call(build: Callable[[int], nn.Module], shape: Shape, rows: int, device: torch.device, context: Context) -> Callable[[], None]:
    """One norm call forward and backward at (rows, width), the norm built at that width (`rows`: NORM_ROWS)."""
    module = build(shape.width).to(device)
    return _in(_fwd_bwd(module, (rows, shape.width), device=device), context)


def norm_share_rounds(
    norms: Mapping[str, Callable[[int], nn.Module]],
    sizes: Sequence[str],
    rounds: int,
    device: torch.device,
    context: Context,
    rows: int = ROWS,
) -> dict[str, Any]:
    """Per norm (name -> its builder at a width) and model size (conf/model names), its share of a
    training step in each of `rounds` interleaved rounds: norm time / (norm time + the rest of the step),
    both per token at that size's shapes. The CPU caller runs it on one thread (src.bench.kernels.cpu_threads)."""
    shapes = [Shape.of(s) for s in sizes]
    rest = {s.name: rest_of_step(s, rows, device, context) for s in shapes}
    norm_rows = max(rows, NORM_ROWS)
    calls = {(n, s.name): norm_call(b, s, norm_rows, device, context) for n, b in norms.items() for s in shapes}
    for fn in [*(f for parts in rest.values() for f, _ in parts.values()), *calls.values()]:
        fn()  # warm-up: allocations, first-call dispatch
    synchronize(device)
    repeats = {key: int(min(MAX_REPEATS, max(1, math.ceil(NORM_SAMPLE_S / max(_timed(fn, device, 1), 1e-7))))) for key, fn in calls.items()}
    samples: dict[str, dict[str, list[float]]] = {n: {s.name: [] for s in shapes} for n in norms}
    rest_s: dict[str, list[float]] = {s.name: [] for s in shapes}
    norm_s: dict[str, dict[str, list[float]]] = {n: {s.name: [] for s in shapes} for n in norms}
    started, said, load_before = time.perf_counter(), time.perf_counter(), load()
    for r in range(rounds):
        order = shapes[r % len(shapes):] + shapes[: r % len(shapes)]
        for s in order:
            other = sum(calls_per_step * _timed(fn, device, 1) for fn, calls_per_step in rest[s.name].values())
            rest_s[s.name].append(other)
            for n in norms:
                per_call = _timed(calls[(n, s.name)], device, repeats[(n, s.name)]) / repeats[(n, s.name)] * rows / norm_rows
                norm = per_call * s.norms
                norm_s[n][s.name].append(norm)
                samples[n][s.name].append(norm / (norm + other))
        if (now := time.perf_counter()) - said >= PROGRESS_S:
            said = now
            say(KERNELS, f"norm share: {r + 1} of {rounds} rounds at {', '.join(sizes)}, {now - started:.0f} s")
    return {
        "sizes": list(sizes),
        "rows": rows,
        "norm_rows": norm_rows,
        "rounds": rounds,
        "samples": samples,  # norm -> size -> its share of a step, one per round
        "norm_s": norm_s,  # norm -> size -> its seconds per `rows` tokens of a step, one per round
        "rest_s": rest_s,  # size -> the rest of the step's seconds per `rows` tokens, one per round
        "denominator": "built from timed parts: block matmuls, GELU, attention at n/2 keys, output head (src/bench/shares.py)",
        "seconds": time.perf_counter() - started,
        "load": {"before": load_before, "after": load()},
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "clock": "thread_cpu" if clock(device) is time.thread_time else "wall",
    }
