"""The normalization layers under study and the one factory that builds them.

Every variant is reached through a string key (what the Hydra `norm/` configs hold), so configs
stay serializable and a new variant is one entry in `NORM_REGISTRY` plus one YAML file.
The same explicit `eps` reaches every variant that has one: `nn.RMSNorm(eps=None)` would silently
use `torch.finfo(dtype).eps` (1.2e-7 in fp32) and skew the comparison. A factory that takes no
`eps` (Dynamic Tanh, the identity) needs none and is not given it.

A factory's other keyword arguments are the variant's options (DyT's `alpha_init`, `bias`); the
norm YAML sets them next to `norm_type`. Any option may be a mapping over `POSITIONS`
(`{attn: 0.8, ffn: 0.2, final: 0.2}`) to give the norms of each position in the model their own value.
`NormSpec` is where a key, eps and options are checked, once: an invalid one raises ValueError
naming the `norm.` field and the choices, before any model is built.

A norm YAML of the user's own may name any class or factory with Hydra's `_target_` instead of a
key (src/model/user_norms.py): it is built the same way, width first, eps by name where it takes one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from src.core.schema import NORM_EPS
from src.model.fast_norms import FastRMSNorm, fast_dyt
from src.model.user_norms import CALL_KEYS, TARGET_KEY, NormSource, NotANorm, UserNorm, check_key, check_runs

DEFAULT_EPS = NORM_EPS  # the same explicit eps for every variant: the config's default `norm.eps` (src/core/schema.py)
# Where a norm sits in the model: in the attention path (its input, output for peri-norm, and the
# per-head query/key norms), in the feed-forward path, or the final norm before the output head.
POSITIONS = ("attn", "ffn", "final")


class HandLayerNorm(nn.Module):
    """LayerNorm written out: per-vector mean and biased variance, learnable scale and shift."""

    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
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


NormFactory = Callable[..., nn.Module]

# key -> constructor(dim, eps, **options). The keys are the values of `norm.norm_type` in conf/norm/*.yaml.
NORM_REGISTRY: dict[str, NormFactory] = {
    "hand_layernorm": lambda dim, eps: HandLayerNorm(dim, eps=eps),
    "torch_layernorm": lambda dim, eps: nn.LayerNorm(dim, eps=eps, elementwise_affine=True, bias=True),
    "hand_rmsnorm": lambda dim, eps: HandRMSNorm(dim, eps=eps),
    "torch_rmsnorm": lambda dim, eps: nn.RMSNorm(dim, eps=eps, elementwise_affine=True),
    "no_norm": lambda dim: nn.Identity(),  # keeps the block structure, normalizes nothing
    "fast_rmsnorm": lambda dim, eps: FastRMSNorm(dim, eps=eps),
    "torch_layernorm_nobias": lambda dim, eps: nn.LayerNorm(dim, eps=eps, elementwise_affine=True, bias=False),
    "layernorm_noaffine": lambda dim, eps: nn.LayerNorm(dim, eps=eps, elementwise_affine=False),
    "scalenorm": ScaleNorm,
    "dyt": DyT,  # options: alpha_init, bias (the constructor's keyword arguments)
    "fast_dyt": FastDyT,
}


def norm_types() -> list[str]:
    """The valid norm keys, in registry order."""
    return list(NORM_REGISTRY)


def check_norm_type(norm_type: str) -> None:
    """Raise a ValueError naming the valid keys when `norm_type` is not one of them."""
    if norm_type not in NORM_REGISTRY:
        raise ValueError(
            f"norm.norm_type: unknown norm_type {norm_type!r}; valid choices: {', '.join(NORM_REGISTRY)}"
        )


def _parameters(norm_type: str) -> list[str]:
    return [p for p in inspect.signature(NORM_REGISTRY[norm_type]).parameters if p != "dim"]


def takes_eps(norm_type: str) -> bool:
    """Whether the variant has an eps (DyT and the identity have none)."""
    return "eps" in _parameters(norm_type)


def norm_options(norm_type: str) -> list[str]:
    """The options a variant accepts besides eps (its factory's keyword arguments)."""
    return [p for p in _parameters(norm_type) if p != "eps"]


@dataclass(frozen=True)
class NormSpec:
    """A checked norm choice: key, eps and options; `build` makes the norm of one position.

    Constructing it checks everything once: the key against the registry, eps, the option names
    against the factory's arguments, per-position mappings, and the option values by building each
    position's norm on the meta device (the constructors own their value checks). With `_target_`
    among its options it is the user's norm (`user`): imported and its signature read here, built
    and run at the model's width by `check_at`.
    """

    norm_type: str
    eps: float = DEFAULT_EPS
    options: Mapping[str, Any] = field(default_factory=dict)
    user: UserNorm | None = field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"norm.eps: must be a positive float, got {self.eps!r}")
        if TARGET_KEY in self.options:
            self._check_user()
            return
        check_norm_type(self.norm_type)
        accepted = norm_options(self.norm_type)
        for name in self.options:
            if name not in accepted:
                choices = ", ".join(accepted) or "none"
                raise ValueError(f"norm.{name}: not an option of {self.norm_type} (its options: {choices})")
        self._check_positions()
        for position in POSITIONS:
            try:
                with torch.device("meta"):
                    self.build(1, position)
            except ValueError as err:
                raise ValueError(f"norm.{err} ({self.norm_type}, {position} position)") from err

    def _check_positions(self) -> None:
        for name, value in self.factory_options.items():
            if isinstance(value, Mapping) and set(value) != set(POSITIONS):
                raise ValueError(
                    f"norm.{name}: a per-position value needs exactly the keys {', '.join(POSITIONS)}, got {', '.join(map(str, value))}"
                )

    def _check_user(self) -> None:
        if self.norm_type in NORM_REGISTRY:
            raise ValueError(
                f"norm.norm_type: {self.norm_type!r} is a built-in variant's name; a norm of your own needs a name of its own: "
                f"rename its YAML (built-ins: {', '.join(NORM_REGISTRY)})"
            )
        self._check_positions()
        call = {k: v for k, v in self.options.items() if k in CALL_KEYS}
        try:
            object.__setattr__(self, "user", UserNorm.of(call, list(self.factory_options)))
        except ValueError as err:
            raise ValueError(f"norm.{err}") from None
        if self.user is not None and self.user.reference and self.user.reference not in NORM_REGISTRY:
            raise ValueError(
                f"norm.reference: {self.user.reference!r} is not a built-in variant, which a norm of your own is compared with; "
                f"valid choices: {', '.join(NORM_REGISTRY)}"
            )

    @property
    def factory_options(self) -> dict[str, Any]:
        """The options its factory takes (a user norm's YAML also holds how to call it: CALL_KEYS)."""
        return {k: v for k, v in self.options.items() if k not in CALL_KEYS}

    @property
    def takes_eps(self) -> bool:
        """Whether the run's eps reaches the norm (a user norm that takes none is built without it)."""
        return self.user.eps_arg is not None if self.user is not None else takes_eps(self.norm_type)

    @functools.cached_property
    def source(self) -> NormSource | None:
        """A user norm's provenance (None for a built-in: its code is the project's)."""
        return NormSource.of(self.user) if self.user is not None else None

    def check_at(self, widths: Sequence[tuple[str, int]], precision: str) -> None:
        """A user norm built at the model's widths (`(position, width)` pairs) on the meta device, then run
        on a random batch under `precision` (src/model/user_norms.py check_runs); ValueError naming
        the field and the fix. Built-ins are checked by construction and need none of it."""
        if self.user is None:
            return
        target = self.user.target
        for position, width in widths:
            try:
                with torch.device("meta"):
                    self.build(width, position)
            except NotANorm as err:
                raise ValueError(f"norm.{err}") from None
            except Exception as err:  # the user's code: whatever it raises is this one refusal
                raise ValueError(
                    f"norm.{TARGET_KEY}: {target} fails to build on the meta device at width {width} "
                    f"({type(err).__name__}: {err}); preflight sizes the model there without memory: create its "
                    "parameters with torch.ones/zeros/empty, without reading their values while building"
                ) from None
            key = check_key(target, self.eps, sorted(self.options_at(position).items(), key=str), width, precision)
            try:
                check_runs(lambda w=width, p=position: self.build(w, p), target, width, precision, key)
            except NotANorm as err:
                raise ValueError(f"norm.{err}") from None
            except Exception as err:
                raise ValueError(
                    f"norm.{TARGET_KEY}: {target} fails on a random batch at width {width} under precision {precision} "
                    f"({type(err).__name__}: {err}); its forward takes a (..., {width}) tensor and returns one"
                ) from None

    def options_at(self, position: str) -> dict[str, Any]:
        """The options of the norms at `position`: per-position mappings resolved to their value."""
        if position not in POSITIONS:
            raise ValueError(f"unknown norm position {position!r}; valid choices: {', '.join(POSITIONS)}")
        return {k: v[position] if isinstance(v, Mapping) else v for k, v in self.factory_options.items()}

    def build(self, dim: int, position: str = "attn") -> nn.Module:
        kwargs = self.options_at(position)
        if self.user is not None:
            return self.user.build(dim, float(self.eps), kwargs)
        if takes_eps(self.norm_type):
            kwargs["eps"] = float(self.eps)
        return NORM_REGISTRY[self.norm_type](dim, **kwargs)


def make_norm(norm_type: str, dim: int, eps: float = DEFAULT_EPS, **options: Any) -> nn.Module:
    """Build the normalization layer registered under `norm_type` for vectors of width `dim`."""
    return NormSpec(norm_type, eps, options).build(dim)
