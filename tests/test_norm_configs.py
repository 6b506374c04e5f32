"""What the one path every norm takes (`src.model.norms.NormSpec`) accepts and refuses: the norm YAMLs
and their targets, shared keys stated once, bad keys, eps and options refused with the field and the
choices (in Python and from the command line), the zoo and stability experiments, and the
norm_family tag in MLflow. A norm of the user's: tests/test_user_norms.py."""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from src.core.norm_yamls import builtin_variants, shipped_norms
from src.core.paths import CONF_DIR, ConfigError, compose
from src.core.schema import NORM_TARGET_KEY
from src.model.gpt import GPTConfig
from src.model.norms import DEFAULT_EPS, make_norm
from src.train import train
from src.training.run_spec import validate

NORM_FILES = sorted((CONF_DIR / "norm").glob("*.yaml"))
STUDY_EXPERIMENTS = ["norm_sweep", "norm_sweep_seeds", "norm_sweep_settle", "no_norm_collapse", "gpt2_small_study"]
STUDY = ["hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm", "no_norm"]


def _compose(*overrides: str) -> DictConfig:
    return compose(list(overrides), with_hydra=True)


def test_every_norm_yaml_names_its_target_and_its_file() -> None:
    assert [f.stem for f in NORM_FILES] == builtin_variants()
    for f in NORM_FILES:
        cfg = _compose(f"norm={f.stem}").norm
        assert cfg.norm_type == f.stem and cfg[NORM_TARGET_KEY] == shipped_norms()[f.stem] != "None"


@pytest.mark.parametrize("path", NORM_FILES, ids=[f.stem for f in NORM_FILES])
def test_norm_yaml_holds_only_what_differs(path) -> None:
    raw = OmegaConf.load(path)
    assert "eps" not in raw  # one eps for every variant: conf/train.yaml
    cfg = _compose(f"norm={path.stem}")
    assert cfg.norm.eps == DEFAULT_EPS
    assert cfg.norm.family in ("layernorm", "rmsnorm", "dyt", "scalenorm", "none")
    validate(cfg)


def test_shared_keys_are_overridable_and_reach_the_model() -> None:
    model = validate(_compose("norm=scalenorm", "norm.eps=1e-6", "model.norm_placement=peri", "model.qk_norm=true"))
    assert (model.norm_eps, model.norm_placement, model.qk_norm) == (1e-6, "peri", True)
    dyt = validate(_compose("norm=fast_dyt", "norm.alpha_init={attn:0.8,ffn:0.2,final:0.2}", "norm.bias=false"))
    assert dyt.norm.norm_type == "fast_dyt"
    assert dyt.norm.options_at("ffn") == {"alpha_init": 0.2, "bias": False}


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["norm=dyt", "norm.alpha_init=0"], r"norm\.alpha_init: must be a number > 0"),
        (["norm=fast_dyt", "norm.alpha_init=-1"], r"norm\.alpha_init"),
        (["norm=dyt", "norm.alpha_init={attn:1}"], r"norm\.alpha_init: .*attn, ffn, final"),
        (["model.norm_placement=side"], r"model\.norm_placement: 'side' is not one of pre, post, peri"),
        (["model.qk_norm=maybe"], r"model\.qk_norm"),
        (["norm.family=null"], r"norm\.family"),
        (["+norm.alpha_init=0.5"], r"norm=torch_layernorm: norm\.alpha_init: not an argument of torch\.nn\.LayerNorm"),
        (["norm.norm_type=batchnorm"], r"norm\.norm_type: 'batchnorm' is not one of the valid choices: dyt, fast_dyt, .*torch_rmsnorm"),
        (["norm._target_=torch.nn.RMSNorm"], r"norm\.norm_type: 'torch_layernorm' is a built-in variant's name"),
    ],
)
def test_bad_values_are_config_errors_naming_field_and_choices(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate(_compose(*overrides))


def test_bad_value_is_refused_before_anything_is_recorded(tiny_overrides: list[str], store: dict[str, str]) -> None:
    cfg = compose([*tiny_overrides, "norm=dyt", "norm.alpha_init=-0.5"])
    with pytest.raises(ConfigError, match="norm.alpha_init"):
        train(cfg)
    assert MlflowClient(store["uri"]).search_experiments(filter_string="name = 'normsweep'") == []


SMALL = {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 97}


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


def test_unknown_key_lists_valid_keys() -> None:
    with pytest.raises(ValueError) as err:
        make_norm("batchnorm", 8)
    for key in builtin_variants():
        assert key in str(err.value)


@pytest.mark.parametrize("eps", [0.0, -1e-5, None])
def test_bad_eps_rejected(eps: float | None) -> None:
    with pytest.raises(ValueError, match="eps"):
        make_norm("hand_rmsnorm", 8, eps)


def test_every_study_preset_writes_out_the_same_five() -> None:
    """Each preset lists the norms it sweeps in its own file (what a Hydra user reads), and the
    presets of the study agree on the five, in the study's order."""
    for name in STUDY_EXPERIMENTS:
        raw = OmegaConf.load(CONF_DIR / "experiment" / f"{name}.yaml")
        assert OmegaConf.to_container(raw)["hydra"]["sweeper"]["params"]["norm"].split(",") == STUDY, name
        assert _compose(f"experiment={name}").hydra.sweeper.params.norm.split(",") == STUDY, name


def test_norm_zoo_sweeps_every_variant_and_seeds() -> None:
    params = _compose("experiment=norm_zoo").hydra.sweeper.params
    assert (params.norm, params.seed) == ("glob(*)", "0,1,2")


def test_lr_stability_grid() -> None:
    cfg = _compose("experiment=lr_stability")
    default_lr = _compose().optim.lr
    grid = [float(v) for v in cfg.hydra.sweeper.params["optim.lr"].split(",")]
    assert len(grid) == 6 and grid == sorted(grid)
    assert grid[0] == pytest.approx(default_lr / 10) and grid[-1] == pytest.approx(default_lr * 10)
    steps = [math.log10(b / a) for a, b in zip(grid, grid[1:], strict=False)]
    assert steps == pytest.approx([0.4] * 5, abs=0.01)  # log-spaced
    assert cfg.optim.grad_clip is None and cfg.optim.min_lr_ratio == 0  # the cosine falls toward zero at every lr
    assert set(cfg.hydra.sweeper.params.norm.split(",")) <= set(builtin_variants())
    assert {"no_norm", "dyt"} <= set(cfg.hydra.sweeper.params.norm.split(","))
    validate(cfg)


def test_norm_zoo_study_is_the_study_preset_with_every_variant() -> None:
    zoo, study = _compose("experiment=norm_zoo_study"), _compose("experiment=gpt2_small_study")
    assert zoo.hydra.sweeper.params.norm == "glob(*)" and zoo.experiment_name == "norm_zoo_study"
    for key in ("model", "data", "optim", "precision", "seq_len"):
        assert zoo[key] == study[key], key


@pytest.mark.slow
def test_a_zoo_variant_trains_and_is_tagged_with_its_family(tiny_overrides: list[str], store: dict[str, str]) -> None:
    overrides = ["norm=fast_dyt", "model.norm_placement=peri", "model.qk_norm=true", "experiment_name=zoo"]
    cfg = compose([*tiny_overrides, *overrides])
    result = train(cfg)
    run = MlflowClient(store["uri"]).get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "finished"
    assert (run.data.tags["norm"], run.data.tags["norm_family"]) == ("fast_dyt", "dyt")
    p = run.data.params
    assert (p["norm.alpha_init"], p["model.norm_placement"], p["model.qk_norm"]) == ("0.5", "peri", "True")
    assert math.isfinite(result.test_loss)
