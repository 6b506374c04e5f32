"""GPT-2 model: the study's parameter counts, shapes, causality, weight tying, FLOPs, parameter order."""

import pytest
import torch

from src.core.norm_yamls import builtin_variants
from src.model.gpt import GPTConfig, GPTModel, count_params, model_stats
from src.model.norms import POSITIONS, NormSpec

SMALL = {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 97}


@pytest.mark.parametrize(
    "norm_type,expected",
    [
        ("hand_layernorm", 163_009_536),
        ("torch_layernorm", 163_009_536),
        ("hand_rmsnorm", 162_990_336),
        ("torch_rmsnorm", 162_990_336),
        ("no_norm", 162_971_136),
    ],
)
def test_gpt2_small_parameter_counts(norm_type: str, expected: int) -> None:
    with torch.device("meta"):  # counts need shapes only, not 650 MB of weights
        model = GPTModel(GPTConfig(norm_type=norm_type))
    assert count_params(model) == expected


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
