"""GPT-2 with a pluggable normalization layer.

The architecture is the GPTModel of "Build a Large Language Model (From Scratch)": token and
learned position embeddings, dropout, pre-norm transformer blocks, a final norm and an output head
without bias. Every norm is built from one checked `NormSpec`, so the model is identical across
variants except for the norm. Two axes move norms around, orthogonal to which norm it is:
`norm_placement` (pre / post / peri, see `TransformerBlock`) and `qk_norm` (the norm applied per
head to queries and keys); their defaults (pre, off) are the study's model. Attention is `attention` (`CausalSelfAttention`): by default
`F.scaled_dot_product_attention(is_causal=True)`, the same fused kernel for every variant; `explicit` is
the study's own computation, the same math at another step time (a norm's share of a step depends on it).
How the weights start is `init` (`init_weights`): by default the study's, PyTorch's constructor
defaults left as they are. `op_order=study` computes the same functions in the study's order of
operations where it differs from ours (its K, Q, V projections, its LayerNorm's divide-then-scale, its
blocks' parameters registered attention first, the order gradient clipping sums them in): with
`attention=explicit` a training step is the study's to the bit in fp32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from src.core.schema import DEFAULT_NORM, Attention, ModelInit, ModelSchema, OpOrder, check_architecture
from src.model.norms import DEFAULT_EPS, HandLayerNorm, NormSpec


@dataclass(frozen=True)
class GPTConfig:
    # A GPTConfig built in Python (a test, a notebook) is GPT-2 small as the study trained it (untied,
    # 163,009,536 parameters), whatever conf/ says: the config's `model=gpt2_small` writes the same
    # values in conf/model/gpt2_small.yaml (tests/test_config.py keeps them equal).
    vocab_size: int = 50257
    context_length: int = 1024
    emb_dim: int = 768
    n_heads: int = 12
    n_layers: int = 12
    drop_rate: float = 0.0
    qkv_bias: bool = False
    tie_weights: bool = False
    norm_type: str = DEFAULT_NORM
    norm_eps: float = DEFAULT_EPS
    norm_options: Mapping[str, Any] = field(default_factory=dict)  # e.g. DyT's alpha_init, bias
    norm_placement: str = ModelSchema.norm_placement
    qk_norm: bool = ModelSchema.qk_norm
    init: str = ModelSchema.init  # a ModelInit: how the weights start (init_weights)
    attention: str = ModelSchema.attention  # an Attention: the fused kernel or the study's explicit softmax
    op_order: str = ModelSchema.op_order  # an OpOrder: ours, or the study's order of the same operations
    norm: NormSpec = field(init=False, repr=False, compare=False)  # the checked norm, built from the three above

    def __post_init__(self) -> None:
        check_architecture(self)
        object.__setattr__(self, "norm", NormSpec(self.norm_type, self.norm_eps, dict(self.norm_options)))
        self.norm.check_at(self.norm_widths)  # built where the model builds it: its options' values checked

    @property
    def norm_widths(self) -> list[tuple[str, int]]:
        """(position, width) of every norm the model builds: QK-norm's are one head wide."""
        widths = [(position, self.emb_dim) for position in ("attn", "ffn", "final")]
        return [*widths, ("attn", self.emb_dim // self.n_heads)] if self.qk_norm else widths


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, computed as `cfg.attention` says:

    sdpa:      F.scaled_dot_product_attention(is_causal=True), the fused kernel;
    explicit:  the study's gpt.py MultiHeadAttention, op for op: scores = Q @ K^T, the future masked
               to -inf, softmax(scores / sqrt(head_dim)), dropout on the weights, @ V. It materializes
               the T x T scores that the fused kernel never does.

    The projections run in `cfg.op_order`'s order: Q, K, V, or the study's K, Q, V. The forward is the
    same either way; backward sums the three input gradients in the reverse order of the projections,
    so the order moves the gradient reaching the norm below by rounding.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.drop_rate = cfg.drop_rate
        self.W_query = nn.Linear(cfg.emb_dim, cfg.emb_dim, bias=cfg.qkv_bias)
        self.W_key = nn.Linear(cfg.emb_dim, cfg.emb_dim, bias=cfg.qkv_bias)
        self.W_value = nn.Linear(cfg.emb_dim, cfg.emb_dim, bias=cfg.qkv_bias)
        self.out_proj = nn.Linear(cfg.emb_dim, cfg.emb_dim)
        if cfg.qk_norm:
            # QK-norm: queries and keys normalized per head (over head_dim) before their dot product.
            head_dim = cfg.emb_dim // cfg.n_heads
            self.q_norm = cfg.norm.build(head_dim, "attn")
            self.k_norm = cfg.norm.build(head_dim, "attn")
        self.qk_norm = cfg.qk_norm
        self.study_order = cfg.op_order == OpOrder.STUDY
        self.explicit = cfg.attention == Attention.EXPLICIT
        if self.explicit:
            # Built once, as the study's buffer is; not persistent, so an sdpa model's state loads into
            # an explicit one (and back) and a checkpoint holds the same tensors either way.
            future = torch.triu(torch.ones(cfg.context_length, cfg.context_length, dtype=torch.bool), diagonal=1)
            self.register_buffer("mask", future, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def heads(w: nn.Linear) -> torch.Tensor:  # (b, t, d) -> (b, heads, t, head_dim)
            return w(x).view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)

        if self.study_order:  # the study's K, Q, V
            k = heads(self.W_key)
            q = heads(self.W_query)
            v = heads(self.W_value)
        else:
            q, k, v = (heads(w) for w in (self.W_query, self.W_key, self.W_value))
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.explicit:
            y = self._explicit(q, k, v)
        else:
            dropout = self.drop_rate if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return self.out_proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        t = q.shape[2]
        scores = (q @ k.transpose(2, 3)).masked_fill_(self.mask[:t, :t], -torch.inf)  # masked, then scaled: the study's order
        weights = torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)
        return F.dropout(weights, self.drop_rate, training=self.training) @ v  # nn.Dropout's own call


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg.emb_dim, 4 * cfg.emb_dim),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * cfg.emb_dim, cfg.emb_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class TransformerBlock(nn.Module):
    """One block; `cfg.norm_placement` says where its norms sit around each sublayer f:

    pre:   x + f(norm(x))            GPT-2, the default
    post:  norm(x + f(x))            the original Transformer (the model then has no final norm)
    peri:  x + norm_out(f(norm(x)))  Peri-LN: the sublayer's input and its output are normalized
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.placement = cfg.norm_placement
        att, ff = CausalSelfAttention(cfg), FeedForward(cfg)
        norm1, norm2 = cfg.norm.build(cfg.emb_dim, "attn"), cfg.norm.build(cfg.emb_dim, "ffn")
        # Registered in forward order, or the study's (attention, MLP, then the norms): the optimizer's
        # state and gradient clipping follow parameter order, and clipping sums the norms in it.
        if cfg.op_order == OpOrder.STUDY:
            self.att, self.ff, self.norm1, self.norm2 = att, ff, norm1, norm2
        else:
            self.norm1, self.att, self.norm2, self.ff = norm1, att, norm2, ff
        self.drop_shortcut = nn.Dropout(cfg.drop_rate)
        if self.placement == "peri":
            self.norm1_out = cfg.norm.build(cfg.emb_dim, "attn")
            self.norm2_out = cfg.norm.build(cfg.emb_dim, "ffn")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "post":
            x = self.norm1(x + self.drop_shortcut(self.att(x)))
            return self.norm2(x + self.drop_shortcut(self.ff(x)))
        if self.placement == "peri":
            x = x + self.drop_shortcut(self.norm1_out(self.att(self.norm1(x))))
            return x + self.drop_shortcut(self.norm2_out(self.ff(self.norm2(x))))
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.drop_emb = nn.Dropout(cfg.drop_rate)
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg.n_layers)])
        # Post-norm blocks already end in a norm: a final one would normalize twice.
        self.final_norm = nn.Identity() if cfg.norm_placement == "post" else cfg.norm.build(cfg.emb_dim, "final")
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.out_head.weight = self.tok_emb.weight
        init_weights(self, ModelInit(cfg.init), cfg.n_layers)
        if cfg.op_order == OpOrder.STUDY:
            for module in self.modules():
                if isinstance(module, HandLayerNorm):
                    module.study_order = True

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.cfg.context_length:
            raise ValueError(f"sequence length {t} exceeds model.context_length {self.cfg.context_length}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop_emb(self.tok_emb(idx) + self.pos_emb(pos))
        x = self.final_norm(self.trf_blocks(x))
        return self.out_head(x)

    def compile_blocks(self) -> None:
        """Regional compilation: each transformer block compiles once and is reused by all of them."""
        for block in self.trf_blocks:
            block.compile()


# The projections that write into the residual stream: what nanoGPT scales down with depth.
RESIDUAL_PROJECTIONS = ("att.out_proj.weight", "ff.layers.2.weight")


def init_weights(model: nn.Module, init: ModelInit, n_layers: int) -> None:
    """Set the starting weights; norm scales and shifts keep their constructors' ones and zeros.

    study:   nothing. PyTorch's constructor defaults stay, as in the study's script, which builds
             its GPT and never re-initializes it: nn.Embedding N(0, 1), nn.Linear Kaiming-uniform
             weights and uniform biases, both within 1/sqrt(fan_in). The residual stream starts
             ~50x larger than under gpt2, and that scale is what a norm controls.
    gpt2:    GPT-2's: N(0, 0.02) for every Linear and Embedding weight, zero biases.
    nanogpt: gpt2, and RESIDUAL_PROJECTIONS at std 0.02 / sqrt(2 * n_layers) (each block adds two
             branches to the stream, so its variance at the top stays that of one layer).
    """
    if init == ModelInit.STUDY:
        return
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    if init == ModelInit.NANOGPT:
        for name, weight in model.named_parameters():
            if name.endswith(RESIDUAL_PROJECTIONS):
                nn.init.normal_(weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))


def count_params(model: nn.Module) -> int:
    """Unique parameters (a tied head is counted once)."""
    return sum(p.numel() for p in model.parameters())


_counted: dict[str, int] = {}  # repr(config) -> parameters: a sweep's jobs mostly share one model


def parameter_count(cfg: GPTConfig) -> int:
    """The model's parameters, from its sizes, with each kind of norm it holds built once on the meta
    device (`NormSpec.param_count`): the same count as `count_params(GPTModel(cfg))`
    (tests/test_model.py checks it for every conf/model YAML, norm and axis) without building the
    model. Building it, even on the meta device, draws its embeddings' initial values, which imports
    torch's compiler stack (~2 s): the sweep's start sizes every job's model, and a launcher that
    trains elsewhere never needs that stack."""
    key = repr(cfg)  # every field but the norm built from three of them
    if key not in _counted and not cfg.norm.shipped:  # a norm of the user's: its model as built, whatever its code shares
        with torch.device("meta"):
            _counted[key] = count_params(GPTModel(cfg))
    if key not in _counted:
        _counted[key] = _sized(cfg)
    return _counted[key]


def _sized(cfg: GPTConfig) -> int:
    d, vocab = cfg.emb_dim, cfg.vocab_size
    norm = cfg.norm.param_count
    attention = 3 * d * d + (3 * d if cfg.qkv_bias else 0) + d * d + d  # W_query, W_key, W_value; out_proj
    if cfg.qk_norm:  # per head, before the dot product
        attention += 2 * norm(d // cfg.n_heads, "attn")
    feed_forward = d * 4 * d + 4 * d + 4 * d * d + d
    norms = norm(d, "attn") + norm(d, "ffn")
    if cfg.norm_placement == "peri":  # each sublayer's output normalized too
        norms *= 2
    block = attention + feed_forward + norms
    final = 0 if cfg.norm_placement == "post" else norm(d, "final")  # post-norm blocks end in one
    head = 0 if cfg.tie_weights else d * vocab  # no bias; a tied head is the token embedding
    return vocab * d + cfg.context_length * d + cfg.n_layers * block + final + head


@dataclass(frozen=True)
class ModelStats:
    n_params: int  # all unique parameters
    n_params_flops: int  # N in 6N: without position embeddings (nanoGPT / PaLM convention)
    flops_per_token: int  # training (forward + backward) FLOPs per token
    n_norm_params: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def model_stats(model: GPTModel) -> ModelStats:
    """Parameter counts and training FLOPs per token: 6·N + 12·L·d·T.

    6·N counts the matmuls of forward (2N) and backward (4N); 12·L·d·T is attention's
    QK^T and AV products over a full context of T tokens (PaLM appendix B).
    """
    cfg = model.cfg
    n_params = count_params(model)
    n_flops = n_params - model.pos_emb.weight.numel()
    attention = 12 * cfg.n_layers * cfg.emb_dim * cfg.context_length
    n_norm = sum(
        p.numel()
        for name, mod in model.named_modules()
        if "norm" in name.rsplit(".", 1)[-1]
        for p in mod.parameters(recurse=False)
    )
    return ModelStats(n_params, n_flops, 6 * n_flops + attention, n_norm)
