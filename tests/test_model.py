"""GPT-2 model: the study's parameter counts with every norm, shapes, causality, weight tying, FLOPs,
parameter order, and the model axes (norm placement, QK-norm, per-position options) computing what they say."""

import itertools
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from src.core.norm_yamls import builtin_variants
from src.core.schema import PLACEMENTS
from src.model.gpt import GPTConfig, GPTModel, count_params, model_stats, parameter_count
from src.model.norms import POSITIONS, NormSpec

SMALL = {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 97}


# GPT-2 small (12 layers, 768 wide): 25 norms of 768 (two per block and the final one).
@pytest.mark.parametrize(
    "norm_type,options,expected",
    [
        ("hand_layernorm", {}, 163_009_536),
        ("torch_layernorm", {}, 163_009_536),
        ("hand_rmsnorm", {}, 162_990_336),
        ("torch_rmsnorm", {}, 162_990_336),
        ("no_norm", {}, 162_971_136),
        ("torch_layernorm_nobias", {}, 162_990_336),  # scale only, like RMSNorm
        ("layernorm_noaffine", {}, 162_971_136),  # no parameters, like no_norm
        ("scalenorm", {}, 162_971_161),  # one scalar per norm
        ("dyt", {}, 163_009_561),  # LayerNorm's scale and shift, plus one alpha per norm
        ("fast_dyt", {}, 163_009_561),
        ("dyt", {"bias": False}, 162_990_361),
    ],
)
def test_gpt2_small_parameter_counts(norm_type: str, options: dict, expected: int) -> None:
    with torch.device("meta"):  # counts need shapes only, not 650 MB of weights
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


MODEL_YAMLS = sorted((Path(__file__).parents[1] / "conf" / "model").glob("*.yaml"))


def _model_yaml(path: Path) -> dict:
    return {k: v for k, v in OmegaConf.to_container(OmegaConf.load(path)).items() if k != "name"}


def _built_count(cfg: GPTConfig) -> int:
    with torch.device("meta"):
        return count_params(GPTModel(cfg))


@pytest.mark.parametrize("model", MODEL_YAMLS, ids=lambda p: p.stem)
def test_parameter_count_is_the_built_models_for_every_model_and_norm(model: Path) -> None:
    """`parameter_count` (sizes and the norms' own counts, no model built) against the model built,
    for every conf/model YAML with every built-in norm."""
    for norm_type in builtin_variants():
        cfg = GPTConfig(**_model_yaml(model), norm_type=norm_type)
        assert parameter_count(cfg) == _built_count(cfg), (model.stem, norm_type)


@pytest.mark.parametrize("norm_type,options", [("torch_layernorm", {}), ("dyt", {"alpha_init": {"attn": 0.8, "ffn": 0.2, "final": 0.2}, "bias": False}), ("scalenorm", {})])
def test_parameter_count_is_the_built_models_on_every_axis(norm_type: str, options: dict) -> None:
    """Every axis that changes the parameters (placement, QK-norm, tied head, qkv bias), each combination."""
    for placement, qk_norm, tie, bias in itertools.product(PLACEMENTS, (False, True), (False, True), (False, True)):
        axes = {"norm_placement": placement, "qk_norm": qk_norm, "tie_weights": tie, "qkv_bias": bias}
        cfg = GPTConfig(**SMALL, **axes, norm_type=norm_type, norm_options=options)
        assert parameter_count(cfg) == _built_count(cfg), axes


def test_flops_per_token_gpt2_small() -> None:
    with torch.device("meta"):
        stats = model_stats(GPTModel(GPTConfig()))
    n = 163_009_536 - 1024 * 768  # N without position embeddings
    assert stats.n_params_flops == n
    assert stats.flops_per_token == 6 * n + 12 * 12 * 768 * 1024
    assert stats.n_norm_params == (2 * 12 + 1) * 2 * 768


def test_output_shape() -> None:
    model = GPTModel(GPTConfig(**SMALL))
    assert model(torch.randint(0, 97, (3, 10))).shape == (3, 10, 97)


@pytest.mark.parametrize("norm_type", ["hand_layernorm", "torch_rmsnorm", "no_norm"])
def test_causal(norm_type: str) -> None:
    torch.manual_seed(0)
    model = GPTModel(GPTConfig(**SMALL, norm_type=norm_type)).eval()
    idx = torch.randint(0, 97, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 97
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[0, :10], b[0, :10])
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_tie_weights_shares_tensor() -> None:
    tied = GPTModel(GPTConfig(**SMALL, tie_weights=True))
    untied = GPTModel(GPTConfig(**SMALL))
    assert tied.out_head.weight is tied.tok_emb.weight
    assert count_params(untied) - count_params(tied) == 97 * 32


def test_same_seed_same_weights_across_norms() -> None:
    # The comparison starts every variant from identical matmul weights.
    weights = []
    for norm_type in ("hand_layernorm", "hand_rmsnorm"):
        torch.manual_seed(0)
        weights.append(GPTModel(GPTConfig(**SMALL, norm_type=norm_type)).trf_blocks[1].att.W_query.weight)
    torch.testing.assert_close(*weights)


@pytest.mark.parametrize("norm_type", builtin_variants())
def test_building_a_norm_draws_no_random_numbers(norm_type: str) -> None:
    # So where a model builds its norms leaves the seeded matmul weights as they are.
    spec = NormSpec(norm_type)
    for position in POSITIONS:
        before = torch.get_rng_state()
        spec.build(32, position)
        assert torch.equal(torch.get_rng_state(), before), position


@pytest.mark.parametrize("placement", ["pre", "post", "peri"])
def test_layers_registered_in_forward_order(placement: str) -> None:
    # Optimizer state (a checkpoint's, by position) and the clipped gradient norm follow this order.
    model = GPTModel(GPTConfig(**SMALL, norm_placement=placement, qk_norm=True))
    block = model.trf_blocks[0]
    peri = ["norm1_out", "norm2_out"] if placement == "peri" else []
    top = ["tok_emb", "pos_emb", "drop_emb", "trf_blocks", "final_norm", "out_head"]
    assert [n for n, _ in model.named_children()] == top
    assert [n for n, _ in block.named_children()] == ["norm1", "att", "norm2", "ff", "drop_shortcut", *peri]
    assert [n for n, _ in block.att.named_children()] == ["W_query", "W_key", "W_value", "out_proj", "q_norm", "k_norm"]


def test_rejects_long_sequence() -> None:
    with pytest.raises(ValueError, match="context_length"):
        GPTModel(GPTConfig(**SMALL))(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize(
    "field,value",
    [("emb_dim", 30), ("n_layers", 0), ("drop_rate", 1.5), ("norm_type", "foo"), ("norm_eps", 0.0)],
)
def test_bad_config_names_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field.split("_")[0] if field != "norm_eps" else "eps"):
        GPTConfig(**{**SMALL, field: value})


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
