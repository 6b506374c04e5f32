"""Each hand-rolled norm against its nn counterpart; the factory and its errors."""

import pytest
import torch
from torch import nn

from src.core.norm_yamls import builtin_variants
from src.model.norms import HandLayerNorm, HandRMSNorm, NormSpec, make_norm

SHAPES = [(4, 16), (2, 7, 32), (3, 5, 768)]
PAIRS = [("hand_layernorm", "torch_layernorm"), ("hand_rmsnorm", "torch_rmsnorm")]


def _copy_affine(hand: nn.Module, ref: nn.Module) -> None:
    # Random affine parameters so the test also checks how scale and shift are applied.
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        hand.scale.copy_(ref.weight)
        if getattr(ref, "bias", None) is not None:
            ref.bias.uniform_(-0.5, 0.5)
            hand.shift.copy_(ref.bias)


def _grads(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.clone().requires_grad_(True)
    y = module(x)
    y.backward(dy)
    return y, [x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("hand_key,ref_key", PAIRS)
@pytest.mark.parametrize("shape", SHAPES)
def test_hand_norm_matches_torch_fp32(hand_key: str, ref_key: str, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    dim = shape[-1]
    hand, ref = make_norm(hand_key, dim, 1e-5), make_norm(ref_key, dim, 1e-5)
    _copy_affine(hand, ref)
    x = torch.randn(shape) * 3 + 1  # non-zero mean so LayerNorm's centering matters
    dy = torch.randn(shape)
    y_hand, g_hand = _grads(hand, x, dy)
    y_ref, g_ref = _grads(ref, x, dy)
    torch.testing.assert_close(y_hand, y_ref, rtol=1e-5, atol=1e-5)
    assert len(g_hand) == len(g_ref)  # input, scale (and shift for LayerNorm)
    for a, b in zip(g_hand, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


# bf16 keeps 8 bits of mantissa: both paths round differently, so compare at bf16 resolution.
BF16_TOL = {"rtol": 2e-2, "atol": 2e-2}


@pytest.mark.parametrize("hand_key,ref_key", PAIRS)
def test_hand_norm_matches_torch_bf16(hand_key: str, ref_key: str) -> None:
    torch.manual_seed(0)
    hand = make_norm(hand_key, 64, 1e-5).to(torch.bfloat16)
    ref = make_norm(ref_key, 64, 1e-5).to(torch.bfloat16)
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    torch.testing.assert_close(hand(x).float(), ref(x).float(), **BF16_TOL)


def test_eps_reaches_every_variant() -> None:
    for key in builtin_variants():
        norm = make_norm(key, 8, eps=3e-4)
        if key == "no_norm":
            assert isinstance(norm, nn.Identity)
        elif not NormSpec(key).takes_eps:  # Dynamic Tanh is element-wise: nothing to divide by, no eps
            assert not hasattr(norm, "eps"), key
        else:
            assert norm.eps == 3e-4, key


def test_eps_changes_output() -> None:
    # A tiny-variance input makes eps visible: proves the value is used, not only stored.
    x = torch.full((2, 8), 1e-3)
    for key in ("hand_rmsnorm", "torch_rmsnorm"):
        a, b = make_norm(key, 8, 1e-5)(x), make_norm(key, 8, 1e-1)(x)
        assert not torch.allclose(a, b), key


def test_the_studys_five_build_their_classes() -> None:
    assert {"hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm", "no_norm"} <= set(builtin_variants())
    assert isinstance(make_norm("hand_layernorm", 8), HandLayerNorm)
    assert isinstance(make_norm("torch_layernorm", 8), nn.LayerNorm)
    assert isinstance(make_norm("hand_rmsnorm", 8), HandRMSNorm)
    assert isinstance(make_norm("torch_rmsnorm", 8), nn.RMSNorm)
    assert make_norm("torch_rmsnorm", 8).elementwise_affine


def test_hand_parameters_initialised_like_torch() -> None:
    ln = make_norm("hand_layernorm", 8)
    assert torch.equal(ln.scale, torch.ones(8)) and torch.equal(ln.shift, torch.zeros(8))
    assert [n for n, _ in make_norm("hand_rmsnorm", 8).named_parameters()] == ["scale"]


def test_unknown_key_lists_valid_keys() -> None:
    with pytest.raises(ValueError) as err:
        make_norm("batchnorm", 8)
    for key in builtin_variants():
        assert key in str(err.value)


@pytest.mark.parametrize("eps", [0.0, -1e-5, None])
def test_bad_eps_rejected(eps: float | None) -> None:
    with pytest.raises(ValueError, match="eps"):
        make_norm("hand_rmsnorm", 8, eps)
