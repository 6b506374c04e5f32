"""Every norm's arithmetic: each hand-rolled norm against its nn counterpart, the variants beyond the
study's five against their formulas (float64, gradcheck), fast_dyt against dyt, eps and initial values."""

from typing import Any

import pytest
import torch
from torch import nn

from src.core.norm_yamls import builtin_variants
from src.model import fast_norms
from src.model.fast_norms import dyt_backward, dyt_forward, fast_dyt
from src.model.norms import DyT, FastDyT, HandLayerNorm, HandRMSNorm, NormSpec, ScaleNorm, make_norm

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


EPS = 1e-5
F64 = torch.float64


def _randomize(module: nn.Module) -> nn.Module:
    # Non-trivial parameters so the tests also check how each one is applied.
    torch.manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand_like(p) + 0.5)
    return module


def _formula(key: str, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Each variant's definition, written with plain tensor ops on its own parameters."""
    if key in ("dyt", "fast_dyt"):
        return m.weight * torch.tanh(m.alpha * x) + m.bias
    if key == "scalenorm":
        return m.g * x / torch.sqrt((x * x).sum(-1, keepdim=True) + EPS)
    centred = x - x.mean(-1, keepdim=True)
    xhat = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + EPS)
    if key == "torch_layernorm_nobias":
        return xhat * m.weight
    assert key == "layernorm_noaffine"
    return xhat


NEW = ["torch_layernorm_nobias", "layernorm_noaffine", "scalenorm", "dyt", "fast_dyt"]


def compiled(key: str) -> Any:
    """fast_dyt compiles its kernels with inductor (a C++ compiler run per shape): a slow case."""
    return pytest.param(key, marks=pytest.mark.slow) if key == "fast_dyt" else key


@pytest.mark.parametrize("key", [compiled(k) for k in NEW])
def test_float64_forward_and_gradients_match_the_formula(key: str) -> None:
    m = _randomize(make_norm(key, 24, EPS).to(F64))
    x = (torch.randn(3, 5, 24, dtype=F64) * 2 + 0.5).requires_grad_(True)
    dy = torch.randn(3, 5, 24, dtype=F64)
    y = m(x)
    y.backward(dy)
    got = [x.grad] + [p.grad for p in m.parameters()]
    x2 = x.detach().clone().requires_grad_(True)
    for p in m.parameters():
        p.grad = None
    want_y = _formula(key, m, x2)
    want_y.backward(dy)
    want = [x2.grad] + [p.grad for p in m.parameters()]
    torch.testing.assert_close(y, want_y, rtol=1e-12, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("key", ["dyt", compiled("fast_dyt"), "scalenorm"])
def test_gradcheck(key: str) -> None:
    m = _randomize(make_norm(key, 6, EPS).to(F64))
    x = torch.randn(4, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *params: torch.func.functional_call(
        m, dict(zip([n for n, _ in m.named_parameters()], params, strict=True)), (x,)
    ), (x, *[p.detach().clone().requires_grad_(True) for p in m.parameters()]))


@pytest.mark.slow  # compiles kernels with inductor (a C++ compiler run per shape)
def test_fast_dyt_kernels_gradcheck_without_bias() -> None:
    x = torch.randn(8, 5, dtype=F64, requires_grad=True)
    a = torch.tensor([0.7], dtype=F64, requires_grad=True)
    w = torch.randn(5, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, a, w: fast_dyt(x, a, w, None), (x, a, w))


@pytest.fixture
def fresh_kernels(monkeypatch: pytest.MonkeyPatch) -> fast_norms._Kernels:
    """Newly compiled DyT kernels, so a test exercises them rather than an earlier fallback."""
    kernels = fast_norms._Kernels("fast_dyt", dyt_forward, dyt_backward)
    monkeypatch.setattr(fast_norms, "DYT_KERNELS", kernels)
    return kernels


# 2-D and 3-D, an odd width, 14 rows (dw summed in chunks of 2); with and without the shift.
@pytest.mark.slow  # compiles kernels with inductor (a C++ compiler run per shape)
@pytest.mark.parametrize("shape,bias", [((64, 48), True), ((2, 7, 33), False)])
def test_fast_dyt_matches_dyt_fp32(shape: tuple[int, ...], bias: bool, fresh_kernels: fast_norms._Kernels) -> None:
    ref = _randomize(DyT(shape[-1], alpha_init=0.8, bias=bias))
    fast = FastDyT(shape[-1], alpha_init=0.8, bias=bias)
    fast.load_state_dict(ref.state_dict())
    x, dy = torch.randn(shape) * 3, torch.randn(shape)
    results = []
    for m in (fast, ref):
        xg = x.clone().requires_grad_(True)
        m(xg).backward(dy)
        results.append([m(x).detach(), xg.grad] + [p.grad for p in m.parameters()])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert fresh_kernels.compiled  # the compiled kernels ran, not the eager fallback


def test_dyt_eager_kernels_match_the_compiled_ones() -> None:
    # The functions the compiled path is built from, run eagerly (the fallback without a compiler).
    torch.manual_seed(0)
    x, dy = torch.randn(16, 12), torch.randn(16, 12)
    a, w, b = torch.tensor([0.6]), torch.rand(12) + 0.5, torch.randn(12)
    ref = _randomize(DyT(12))
    with torch.no_grad():
        ref.alpha.copy_(a), ref.weight.copy_(w), ref.bias.copy_(b)
    xg = x.clone().requires_grad_(True)
    ref(xg).backward(dy)
    torch.testing.assert_close(dyt_forward(x, a, w, b), ref(x).detach())
    for chunk in (1, 8):
        dx, da, dw, db = dyt_backward(dy, x, a, w, chunk)
        for got, want in zip((dx, da, dw, db), (xg.grad, ref.alpha.grad, ref.weight.grad, ref.bias.grad), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # compiles kernels with inductor (a C++ compiler run per shape)
def test_fast_dyt_bf16() -> None:
    ref, fast = DyT(64), FastDyT(64)
    x = torch.randn(4, 8, 64).bfloat16()
    torch.testing.assert_close(fast.bfloat16()(x).float(), ref(x.float()), atol=2e-2, rtol=2e-2)


def test_initial_parameters() -> None:
    assert torch.equal(make_norm("scalenorm", 16).g, torch.tensor([4.0]))
    dyt = make_norm("dyt", 8)
    assert torch.equal(dyt.alpha, torch.tensor([0.5])) and torch.equal(dyt.weight, torch.ones(8))
    assert make_norm("dyt", 8, alpha_init=2.0, bias=False).bias is None
    assert [n for n, _ in make_norm("torch_layernorm_nobias", 8).named_parameters()] == ["weight"]
    assert list(make_norm("layernorm_noaffine", 8).parameters()) == []
    assert isinstance(make_norm("scalenorm", 8), ScaleNorm)
