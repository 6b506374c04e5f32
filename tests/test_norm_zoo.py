"""The variants beyond the study's five against their formulas, fast_dyt against dyt, options, and
the model axes (norm placement, QK-norm) computing what they say."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from src.model import fast_norms
from src.model.fast_norms import dyt_backward, dyt_forward, fast_dyt
from src.model.gpt import GPTConfig, GPTModel, count_params, model_stats
from src.model.norms import POSITIONS, DyT, FastDyT, ScaleNorm, make_norm

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


@pytest.mark.parametrize(
    "options,match",
    [
        ({"alpha_init": 0.0}, r"norm\.alpha_init: must be a number > 0"),
        ({"alpha_init": -0.5}, r"norm\.alpha_init"),
        ({"alpha_init": {"attn": 0.8, "ffn": -1.0, "final": 0.2}}, r"norm\.alpha_init.*ffn position"),
        ({"alpha_init": {"attn": 0.8}}, r"norm\.alpha_init: a per-position value needs exactly the keys attn, ffn, final"),
        ({"alpha": 0.5}, r"norm\.alpha: not an argument of src\.model\.norms\.DyT \(its options: alpha_init, bias\)"),
        ({"bias": "yes"}, r"norm\.bias"),
    ],
)
def test_bad_options_name_the_field(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GPTConfig(**SMALL, norm_type="dyt", norm_options=options)  # the model's config builds its norms once


def test_options_of_a_norm_without_any_are_refused() -> None:
    with pytest.raises(ValueError, match=r"norm\.alpha_init: not an argument of src\.model\.norms\.HandLayerNorm \(its options: none\)"):
        make_norm("hand_layernorm", 8, alpha_init=0.5)


# GPT-2 small (12 layers, 768 wide): 25 norms of 768 (two per block and the final one).
@pytest.mark.parametrize(
    "norm_type,options,expected",
    [
        ("torch_layernorm_nobias", {}, 162_990_336),  # scale only, like RMSNorm
        ("layernorm_noaffine", {}, 162_971_136),  # no parameters, like no_norm
        ("scalenorm", {}, 162_971_161),  # one scalar per norm
        ("dyt", {}, 163_009_561),  # LayerNorm's scale and shift, plus one alpha per norm
        ("fast_dyt", {}, 163_009_561),
        ("dyt", {"bias": False}, 162_990_361),
    ],
)
def test_gpt2_small_parameter_counts(norm_type: str, options: dict, expected: int) -> None:
    with torch.device("meta"):
        assert count_params(GPTModel(GPTConfig(norm_type=norm_type, norm_options=options))) == expected


@pytest.mark.parametrize(
    "axes,expected",
    [
        ({"norm_placement": "post"}, 163_009_536 - 1_536),  # no final norm
        ({"norm_placement": "peri"}, 163_009_536 + 24 * 1_536),  # an output norm per sublayer
        ({"qk_norm": True}, 163_009_536 + 12 * 2 * 2 * 64),  # query and key norms over head_dim 64
    ],
)
def test_gpt2_small_parameter_counts_of_the_axes(axes: dict, expected: int) -> None:
    with torch.device("meta"):
        assert count_params(GPTModel(GPTConfig(**axes))) == expected


SMALL = {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 97}


def _model(**kw: object) -> GPTModel:
    torch.manual_seed(0)
    model = GPTModel(GPTConfig(**SMALL, **kw)).eval()
    for name, p in model.named_parameters():
        if "norm" in name:  # non-trivial norm parameters: a misplaced norm changes the output
            with torch.no_grad():
                p.copy_(torch.rand_like(p) + 0.5)
    return model


def _by_hand(model: GPTModel, idx: torch.Tensor, block: object) -> torch.Tensor:
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
    for b in model.trf_blocks:
        x = block(b, x)
    return model.out_head(model.final_norm(x))


@pytest.mark.parametrize(
    "placement,block",
    [
        ("pre", lambda b, x: (h := x + b.att(b.norm1(x))) + b.ff(b.norm2(h))),
        ("post", lambda b, x: b.norm2((h := b.norm1(x + b.att(x))) + b.ff(h))),
        ("peri", lambda b, x: (h := x + b.norm1_out(b.att(b.norm1(x)))) + b.norm2_out(b.ff(b.norm2(h)))),
    ],
)
@pytest.mark.parametrize("norm_type", ["torch_layernorm", "dyt"])
def test_placement_computes_what_it_says(placement: str, block: object, norm_type: str) -> None:
    model = _model(norm_type=norm_type, norm_placement=placement)
    idx = torch.randint(0, 97, (2, 16))
    torch.testing.assert_close(model(idx), _by_hand(model, idx, block))
    assert isinstance(model.final_norm, nn.Identity) == (placement == "post")


def test_qk_norm_normalizes_queries_and_keys_per_head() -> None:
    model = _model(qk_norm=True, norm_type="torch_rmsnorm")
    att = model.trf_blocks[0].att
    x = torch.randn(2, 16, 32)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(2, 16, 4, 8).transpose(1, 2)

    q, k, v = att.q_norm(heads(att.W_query(x))), att.k_norm(heads(att.W_key(x))), heads(att.W_value(x))
    scores = (q @ k.transpose(-2, -1)) / 8**0.5
    scores = scores.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 16, 32)
    torch.testing.assert_close(att(x), att.out_proj(y), rtol=1e-5, atol=1e-5)
    assert att.q_norm.weight.shape == (8,)
    assert model_stats(model).n_norm_params == (2 * 2 + 1) * 32 + 2 * 2 * 8


def test_default_axes_leave_the_model_unchanged() -> None:
    # Same seed, same weights, same output as the study's pre-norm model without QK-norm.
    a, b = _model(), _model(norm_placement="pre", qk_norm=False)
    idx = torch.randint(0, 97, (1, 16))
    torch.testing.assert_close(a(idx), b(idx))
    assert not hasattr(a.trf_blocks[0].att, "q_norm") and not hasattr(a.trf_blocks[0], "norm1_out")


def test_alpha_init_per_position() -> None:
    model = _model(norm_type="dyt", norm_options={"alpha_init": {"attn": 0.8, "ffn": 0.2, "final": 0.1}}, qk_norm=True)
    torch.manual_seed(0)
    model = GPTModel(model.cfg)  # fresh parameters: alpha at its initial value
    block = model.trf_blocks[0]
    assert [m.alpha.item() for m in (block.norm1, block.att.q_norm, block.norm2, model.final_norm)] == pytest.approx(
        [0.8, 0.8, 0.2, 0.1]
    )
    assert set(POSITIONS) == {"attn", "ffn", "final"}


@pytest.mark.parametrize("field,value,match", [("norm_placement", "side", r"model\.norm_placement: 'side' is not one of pre, post, peri"),
                                               ("qk_norm", "yes", r"model\.qk_norm")])
def test_bad_axes_name_the_field_and_choices(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GPTConfig(**SMALL, **{field: value})
