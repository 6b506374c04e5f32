"""The normalization layers under study, and `NormSpec`: the one path that builds and checks every norm.

Every norm YAML names its class or factory with Hydra's `_target_`: the shipped ones (conf/norm/)
name the classes below or torch's, a user's its own (src/model/user_norms.py). Each is called the
same way: the model's width first, the same explicit `eps` by name where it takes one
(`nn.RMSNorm(eps=None)` would silently use `torch.finfo(dtype).eps`, 1.2e-7 in fp32, and skew the
comparison; Dynamic Tanh and the identity take none and are given none), its other keyword
arguments (DyT's `alpha_init`, `bias`) as the variant's options, set next to `norm_type`. Any option
may be a mapping over `POSITIONS` (`{attn: 0.8, ffn: 0.2, final: 0.2}`) to give the norms of each
position their own value. An invalid choice raises ValueError naming the `norm.` field and the
choices, before any model is built.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from src.core.norm_source import NormSource
from src.core.norm_yamls import shipped_norms
from src.core.schema import NORM_EPS
from src.model.fast_norms import fast_dyt
from src.model.user_norms import CALL_KEYS, TARGET_KEY, NotANorm, UserNorm, check_key, check_runs

DEFAULT_EPS = NORM_EPS  # the same explicit eps for every variant: the config's default `norm.eps` (src/core/schema.py)
# Where a norm sits in the model: in the attention path (its input, output for peri-norm, and the
# per-head query/key norms), in the feed-forward path, or the final norm before the output head.
POSITIONS = ("attn", "ffn", "final")


class HandLayerNorm(nn.Module):
    """LayerNorm written out: per-vector mean and biased variance, learnable scale and shift.

    `study_order` (set by the model under `model.op_order=study`, not a norm option: it is one
    setting for every norm of a sweep) divides first and scales the normalized vector, the study's
    gpt.py order; by default the scale multiplies x - mean before the division. The same function,
    rounded apart once the scales move from 1.
    """

    study_order = False

    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        if self.study_order:
            return self.scale * ((x - mean) / torch.sqrt(var + self.eps)) + self.shift
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift

    def extra_repr(self) -> str:
        return f"{self.scale.numel()}, eps={self.eps}"


class HandRMSNorm(nn.Module):
    """RMSNorm written out: x / sqrt(mean(x^2) + eps) * scale; no shift, no mean subtraction."""

    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x / rms * self.scale

    def extra_repr(self) -> str:
        return f"{self.scale.numel()}, eps={self.eps}"


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al., 2025), written out: weight * tanh(alpha * x) + bias.

    Element-wise, no statistics over the vector: alpha is one learnable scalar per layer
    (initialised to `alpha_init`), weight and bias are per-channel like LayerNorm's.
    """

    def __init__(self, dim: int, alpha_init: float = 0.5, bias: bool = True) -> None:
        super().__init__()
        if isinstance(alpha_init, bool) or not isinstance(alpha_init, (int, float)) or not alpha_init > 0:
            # tanh(alpha x) with alpha <= 0 flips or flattens every activation: not DyT.
            raise ValueError(f"alpha_init: must be a number > 0, got {alpha_init!r}")
        if not isinstance(bias, bool):
            raise ValueError(f"bias: must be true or false, got {bias!r}")
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.weight * torch.tanh(self.alpha * x)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, bias={self.bias is not None}"


class FastDyT(DyT):
    """DyT with a compiled one-pass forward and backward (`src.model.fast_norms`); same parameters as `DyT`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dyt(x, self.alpha, self.weight, self.bias)


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar, 2019): g * x / sqrt(sum(x^2) + eps), one learnable scalar g = sqrt(dim).

    At initialisation it equals RMSNorm with a unit scale (and eps / dim); it then learns one gain
    for the whole vector instead of one per channel.
    """

    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.full((1,), float(dim) ** 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.g * x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + self.eps)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


def layernorm_nobias(dim: int, eps: float) -> nn.Module:
    """nn.LayerNorm with a learnable scale and no shift."""
    return nn.LayerNorm(dim, eps=eps, elementwise_affine=True, bias=False)


def layernorm_noaffine(dim: int, eps: float) -> nn.Module:
    """nn.LayerNorm normalizing only: no learnable scale or shift."""
    return nn.LayerNorm(dim, eps=eps, elementwise_affine=False)


def no_norm(dim: int) -> nn.Module:
    """The identity: keeps the block structure, normalizes nothing (no eps, no options)."""
    return nn.Identity()


@dataclass(frozen=True)
class NormSpec:
    """A checked norm choice: its key, eps and options, and the `_target_` that builds it.

    Every norm takes this one path: a shipped one's target is the one its conf/norm YAML names
    (`src.core.norm_yamls.shipped_norms`), a user's the one in the options. Constructing it checks,
    once, eps, the target (imported with Hydra's `get_object`), the option names against its
    signature, per-position mappings and `reference`; `check_at` builds it at the model's widths on
    the meta device (the constructors own their value checks) and runs a norm whose code the run's
    code fingerprint does not hold on a random batch.
    """

    norm_type: str
    eps: float = DEFAULT_EPS
    options: Mapping[str, Any] = field(default_factory=dict)
    maker: UserNorm = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"norm.eps: must be a positive float, got {self.eps!r}")
        shipped = shipped_norms()
        call = {k: v for k, v in self.options.items() if k in CALL_KEYS}
        target = call.setdefault(TARGET_KEY, shipped.get(self.norm_type))
        if target is None:
            raise ValueError(f"norm.norm_type: unknown norm_type {self.norm_type!r}; valid choices: {', '.join(shipped)}")
        if self.norm_type in shipped and target != shipped[self.norm_type]:
            raise ValueError(
                f"norm.norm_type: {self.norm_type!r} is a built-in variant's name; a norm of your own needs a name of its own: "
                f"rename its YAML (built-ins: {', '.join(shipped)})"
            )
        for name, value in self.factory_options.items():
            if isinstance(value, Mapping) and set(value) != set(POSITIONS):
                raise ValueError(
                    f"norm.{name}: a per-position value needs exactly the keys {', '.join(POSITIONS)}, got {', '.join(map(str, value))}"
                )
        try:
            object.__setattr__(self, "maker", UserNorm.of(call, list(self.factory_options)))
        except ValueError as err:
            raise ValueError(f"norm.{err}") from None
        if self.maker.reference and self.maker.reference not in shipped:
            raise ValueError(
                f"norm.reference: {self.maker.reference!r} is not a built-in variant, which a norm of your own is compared with; "
                f"valid choices: {', '.join(shipped)}"
            )

    @property
    def shipped(self) -> bool:
        """One of normsweep's own: its code is the project's (in the run's code fingerprint, tested by its tests)."""
        return shipped_norms().get(self.norm_type) == self.maker.target

    @property
    def factory_options(self) -> dict[str, Any]:
        """The options its factory takes (the YAML also holds how to call it: CALL_KEYS)."""
        return {k: v for k, v in self.options.items() if k not in CALL_KEYS}

    @property
    def takes_eps(self) -> bool:
        """Whether the run's eps reaches the norm (DyT, the identity, a user's norm without one: not)."""
        return self.maker.eps_arg is not None

    @functools.cached_property
    def source(self) -> NormSource | None:
        """A user norm's provenance (None for a shipped one: its code is the project's)."""
        return None if self.shipped else NormSource.of(self.maker.target, self.maker.factory, self.maker.reference)

    def check_at(self, widths: Sequence[tuple[str, int]], precision: str | None = None) -> None:
        """Built at the model's widths (`(position, width)` pairs) on the meta device, then, for a norm
        that is not shipped and a `precision`, run on a random batch under it (src/model/user_norms.py
        check_runs); ValueError naming the field and the fix."""
        target = self.maker.target
        for position, width in widths:
            try:
                with torch.device("meta"):
                    self.build(width, position)
            except ValueError:
                raise
            except Exception as err:  # the user's code: whatever it raises is this one refusal
                raise ValueError(
                    f"norm.{TARGET_KEY}: {target} fails to build on the meta device at width {width} "
                    f"({type(err).__name__}: {err}); preflight sizes the model there without memory: create its "
                    "parameters with torch.ones/zeros/empty, without reading their values while building"
                ) from None
            if self.shipped or precision is None:
                continue
            options = sorted(self.options_at(position).items(), key=str)
            key = check_key(target, self.source, self.eps, options, width, precision)
            try:
                check_runs(lambda w=width, p=position: self.build(w, p), target, width, precision, key)
            except NotANorm as err:
                raise ValueError(f"norm.{err}") from None
            except Exception as err:
                raise ValueError(
                    f"norm.{TARGET_KEY}: {target} fails on a random batch at width {width} under precision {precision} "
                    f"({type(err).__name__}: {err}); its forward takes a (..., {width}) tensor and returns one"
                ) from None

    def param_count(self, width: int, position: str) -> int:
        """The parameters of one norm of `position` at `width`, built on the meta device (no memory, no
        values drawn): what the norm's constructor makes, whoever wrote it."""
        with torch.device("meta"):
            return sum(p.numel() for p in self.build(width, position).parameters())

    def options_at(self, position: str) -> dict[str, Any]:
        """The options of the norms at `position`: per-position mappings resolved to their value."""
        if position not in POSITIONS:
            raise ValueError(f"unknown norm position {position!r}; valid choices: {', '.join(POSITIONS)}")
        return {k: v[position] if isinstance(v, Mapping) else v for k, v in self.factory_options.items()}

    def build(self, dim: int, position: str = "attn") -> nn.Module:
        """The norm of `position` at width `dim`; a constructor's refusal of a value becomes a ValueError
        naming the `norm.` field, the variant and the position."""
        try:
            return self.maker.build(dim, float(self.eps), self.options_at(position))
        except NotANorm as err:
            raise ValueError(f"norm.{err}") from None
        except ValueError as err:
            raise ValueError(f"norm.{err} ({self.norm_type}, {position} position)") from err


def make_norm(norm_type: str, dim: int, eps: float = DEFAULT_EPS, **options: Any) -> nn.Module:
    """Build the norm `norm_type` names (a shipped one, or `_target_` among the options) at width `dim`."""
    return NormSpec(norm_type, eps, options).build(dim)
