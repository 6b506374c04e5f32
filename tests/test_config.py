"""Every option of every config group composes; validation and the training budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_train
from omegaconf import DictConfig, OmegaConf

from src.core.budget import resolve_budget
from src.core.paths import CONF_DIR, ConfigError, compose
from src.core.schema import DATA_SCHEMAS, LIGHTNING_PRECISIONS, TrainConfig
from src.data.fineweb import FineWebSource
from src.data.text_files import TextFilesSource
from src.model.gpt import GPTConfig
from src.model.norms import DEFAULT_EPS, make_norm
from src.tracking.identity import fingerprint, flatten
from src.training.run_spec import model_config, validate
from src.training.schedule import lr_factor, warmup_steps_for

# Groups whose options are discovered from conf/, so a new YAML file is covered automatically.
# conf/claims holds claims files, which the report reads (report.claims), never composed into a run's config.
GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in ("hydra", "claims"))
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONF_DIR / g).glob("*.yaml"))]
# Options that need a value only the user can give (a glob of their files).
REQUIRED = {("data", "text_files"): ["data.paths=/tmp/none/*.txt"], ("data", "safetensors"): ["data.folder=/tmp/none"]}


def _compose(overrides: list[str]) -> DictConfig:
    return compose(overrides, with_hydra=True)


def test_discovers_every_group() -> None:
    assert {"norm", "model", "data", "cluster", "precision", "optim", "logger", "experiment", "paths"} <= set(GROUPS)
    assert len([o for o in OPTIONS if o[0] == "norm"]) >= 5


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(group: str, option: str) -> None:
    cfg = _compose([f"{group}={option}", *REQUIRED.get((group, option), [])])
    # Resolve every interpolation (paths, run name, ...) as a job would.
    flat = flatten(DictConfig({k: v for k, v in cfg.items() if k != "hydra"}))
    assert flat["run_name"] == f"{cfg.norm.norm_type}-s{cfg.seed}"
    if group in ("cluster", "precision") and cfg.cluster.accelerator != "cpu":
        return  # device-specific options are checked against the device at run time
    validate(cfg)


def test_defaults_are_the_embedded_ones() -> None:
    cfg = _compose([])
    assert cfg.cluster.accelerator == "cpu" and cfg.data.source == "shakespeare"
    assert cfg.logger.tracking_uri == f"sqlite:///{Path(cfg.paths.root_dir) / 'mlflow.db'}"
    assert cfg.logger.tracking_uri.startswith("sqlite:////")  # absolute: one store whatever the cwd
    assert Path(cfg.logger.artifact_location).is_absolute()


def test_norm_sweep_lists_the_five_variants() -> None:
    cfg = _compose(["experiment=norm_sweep"])
    swept = cfg.hydra.sweeper.params.norm.split(",")
    assert swept == ["hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm", "no_norm"]


@pytest.mark.parametrize(
    "override,field",
    [
        ("optim.lr=-0.001", "optim.lr"),
        ("optim.min_lr_ratio=1.5", "optim.min_lr_ratio"),
        ("model.init=xavier", "model.init"),
        ("optim.warmup_fraction=1.5", "optim.warmup_fraction"),
        ("optim.micro_batch_size=0", "optim.micro_batch_size"),
        ("optim.max_steps=0", "optim.max_steps"),
        ("optim.grad_clip=-1", "optim.grad_clip"),
        ("seq_len=4096", "seq_len"),
        ("norm.norm_type=batchnorm", "norm.norm_type"),
        ("norm.eps=0", "eps"),
        ("model.emb_dim=30", "model.emb_dim"),
        ("precision.lightning=fp8", "precision.lightning"),
        ("optim.lr=fast", "optim.lr"),
        ("cluster.strategy=bogus", "cluster.strategy"),  # was Lightning's ValueError once the run had started
        ("cluster.accelerator=bogus", "cluster.accelerator"),
        ("+optim.lrr=1", "optim.lrr"),  # appended under a typed group: nothing reads it
        ("+cluster.spans_machines=true", "cluster.spans_machines"),
    ],
)
def test_invalid_values_name_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        validate(_compose([override]))


@pytest.mark.parametrize(
    "override,line",
    [
        ("seed=abc", "seed: 'abc' is not an integer"),
        ("seed=1.5", "seed: 1.5 is not an integer"),
        ("optim.lr=fast", "optim.lr: 'fast' is not a number"),
        ("optim.betas=[0.9,x]", "optim.betas: 'x' is not a number"),
        ("compile=maybe", "compile: "),
        ("norm=nope", "norm: no option 'nope' (conf/norm/); valid choices: dyt, "),
        ("experiment=nope", "experiment: no option 'nope' (conf/experiment/); valid choices: "),
        # the cluster and logger options are typed too (src/core/schema.py CLUSTER_SCHEMAS, LOGGER_SCHEMAS):
        # 1.5 trained on int(1.5) = 1 device, 'abc' was a TypeError once the run had started
        ("cluster.devices=1.5", "cluster.devices: 1.5 is not an integer"),
        ("cluster.devices=abc", "cluster.devices: 'abc' is not an integer"),
        ("cluster=cpu_pool cluster.workers=abc", "cluster.workers: 'abc' is not an integer"),
        ("cluster=slurm cluster.spans_machines=often", "cluster.spans_machines: 'often' is not a boolean (true or false)"),
        ("logger.enabled=maybe", "logger.enabled: 'maybe' is not a boolean (true or false)"),
        ("logger.system_metrics_s=abc", "logger.system_metrics_s: 'abc' is not a number"),
        ("logger.ui.port=http", "logger.ui.port: 'http' is not an integer"),
        # a misspelt key: Hydra's own advice was to append it with `+`, which nothing would have read
        ("optim.lrr=1", "optim.lrr: no such key; did you mean optim.lr? (optim's keys: name, lr, min_lr_ratio, "),
        ("cluster.device=2", "cluster.device: no such key; did you mean cluster.devices? (cluster's keys: name, "),
        # a sweep without -m: Hydra's advice included key=[a,b], which for a group merges both options
        ("seed=0,1", "seed=0,1: a sweep, which only -m (--multirun) runs: add -m, or quote the value for one string (seed='0,1')"),
        ("norm=glob(*)", "norm=glob(*): a sweep, which only -m (--multirun) runs: add -m"),
        # ...and that list was taken: the options merged into one config, no_norm's winning, trained alone
        ("norm=[hand_rmsnorm,no_norm]", "norm=[hand_rmsnorm,no_norm]: a list of norm options merges them into one config (the last, no_norm, wins); a sweep of them is -m norm=hand_rmsnorm,no_norm"),
        # a group's node given an option's name: Hydra failed inside the sweep, after recording its run
        ("hydra.launcher=joblib", "hydra.launcher=joblib: hydra.launcher is the config that a hydra/launcher option sets, not the option's name; choose the option with hydra/launcher=joblib (valid choices: basic, joblib, node, "),
        ("+norm=hand_rmsnorm", "+norm=hand_rmsnorm: norm has an option already; choose another without the '+': norm=hand_rmsnorm"),
        # Hydra's lexer takes no letter outside ASCII unquoted: its own line named neither quoting nor this Hydra's grammar
        ("experiment_name=ñörm", "experiment_name=ñörm: 'ñ' is not allowed in an unquoted value; quote the value: experiment_name='ñörm' (on a shell's command line: \"experiment_name='ñörm'\"); the override grammar: https://hydra.cc/docs/"),
        ("experiment_name=x'y", "experiment_name=x'y: \"'\" is not allowed in an unquoted value; quote the value: experiment_name=\"x'y\"; the override grammar: "),
    ],
)
def test_schema_refuses_while_composing(override: str, line: str) -> None:
    """Types and group options fail in compose, before validate, in one line naming the key."""
    with pytest.raises(ConfigError) as refused:
        compose(override.split())
    assert str(refused.value).startswith(line) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.parametrize("override", ["report.claims=[my claims ü]", "experiment_name=ñörm", "report.claims=[ä,b c]"])
def test_the_quoting_hint_gives_a_form_that_composes(override: str) -> None:
    """A list's hint quoted the whole list (`report.claims='[my claims ü]'`), which was then refused as
    "str is not a ListConfig"; the elements are quoted now, and the hinted override composes as given."""
    with pytest.raises(ConfigError) as refused:
        compose([override])
    hinted = str(refused.value).split("quote the value: ", 1)[1].split(" (on a shell", 1)[0].split("; the override", 1)[0]
    key, _, value = override.partition("=")
    cfg = compose([hinted])
    if value.startswith("["):
        assert list(OmegaConf.select(cfg, key)) == [e.strip() for e in value[1:-1].split(",")], hinted
    else:
        assert OmegaConf.select(cfg, key) == value


def test_lists_and_dotted_keys_that_mean_what_they_say_are_kept() -> None:
    """What the refusals of group lists and of option names on a group's node leave alone."""
    assert compose(["norm=[hand_rmsnorm]"]).norm.norm_type == "hand_rmsnorm"  # a one-option list is that option
    assert list(compose(["optim.betas=[0.8,0.9]"]).optim.betas) == [0.8, 0.9]  # a list value of a key
    assert compose(["hydra/launcher=joblib"], with_hydra=True).hydra.launcher._target_.endswith("JoblibLauncher")
    assert compose(["hydra.launcher.n_jobs=3", "hydra/launcher=joblib"], with_hydra=True).hydra.launcher.n_jobs == 3


def test_a_choice_names_the_key_and_its_choices() -> None:
    with pytest.raises(ConfigError) as refused:
        validate(compose(["precision.lightning=fp8"]))
    assert str(refused.value) == f"precision.lightning: 'fp8' is not one of the valid choices: {', '.join(LIGHTNING_PRECISIONS)}"


def test_python_defaults_read_no_yaml_and_equal_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GPTConfig(), the norms' eps and the data sources built in Python read no file but the shipped
    norms' targets (conf/norm, once per process: a notebook's model is otherwise the same whatever
    conf/ says), and equal what `model=gpt2_small`, `data=fineweb` and
    `data=text_files` compose: the Python API's defaults and the YAML's values cannot drift apart."""
    composed = model_config(compose(["model=gpt2_small"]))

    def no_yaml(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a default was read from YAML: {args}")

    fineweb, text_files = compose(["data=fineweb"]).data, compose(["data=text_files", "data.paths=x"]).data
    monkeypatch.setattr(OmegaConf, "load", no_yaml)
    default = GPTConfig()
    assert default == composed
    assert (default.norm_type, default.norm_eps, default.norm_placement, default.qk_norm) == ("torch_layernorm", 1e-5, "pre", False)
    assert make_norm("torch_layernorm", 8).eps == DEFAULT_EPS == 1e-5
    # The data sources too: a source built in Python has the options `data=<source>` composes.
    web = FineWebSource()
    assert (web.dataset, web.subset, web.val_fraction, web.shard_tokens, web.num_proc, web.verify_checksums) == (
        fineweb.dataset, fineweb.subset, fineweb.val_fraction, fineweb.shard_tokens, fineweb.num_proc, fineweb.verify_checksums
    )
    assert (web.split_by, web.literal_eot) == (fineweb.split_by, fineweb.literal_eot)
    (tmp_path / "a.txt").write_text("a document")
    local = TextFilesSource(str(tmp_path / "*.txt"))
    assert (local.val_fraction, local.test_fraction) == (text_files.val_fraction, text_files.test_fraction)


# The groups whose options own their values: each file writes out every value it sets, with its
# comment, and the schema holds only the types (docs/configuration.md). Keys of these groups that no
# option sets are one default for every option, the schema's.
VALUE_GROUPS = ("model", "data", "optim", "precision", "cluster")
SCHEMA_DEFAULTS = {"model": {"norm_placement", "qk_norm", "init", "attention", "op_order"}, "data": {"order"}}
VALUE_OPTIONS = [(g, o) for g, o in OPTIONS if g in VALUE_GROUPS]


def _written(group: str, option: str) -> dict[str, object]:
    """The values `conf/<group>/<option>.yaml` writes for its group's node (unresolved). An option that
    builds on another of its group (`defaults: [adamw, _self_]`) writes what it changes: the values it
    does not are that option's, written there (each value has one owner)."""
    path = CONF_DIR / group / f"{option}.yaml"
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(raw, dict)
    based_on = [d for d in raw.pop("defaults", None) or [] if isinstance(d, str) and (CONF_DIR / group / f"{d}.yaml").is_file()]
    is_global = "# @package _global_" in path.read_text().splitlines()[:1]
    node = raw.get(group, {}) if is_global else raw
    assert isinstance(node, dict)
    inherited: dict[str, object] = {}
    for base in based_on:
        inherited.update(_written(group, base))
    return {**inherited, **node}


@pytest.mark.parametrize("group,option", VALUE_OPTIONS, ids=[f"{g}={o}" for g, o in VALUE_OPTIONS])
def test_each_group_file_writes_out_the_values_it_sets(group: str, option: str) -> None:
    """Every key the option composes is written in its file with the composed value, and the schema
    has no default of its own for it (one owner: the file a Hydra user opens)."""
    written = _written(group, option)
    composed = OmegaConf.to_container(compose([f"{group}={option}"])[group], resolve=False)
    assert isinstance(composed, dict)
    unwritten = sorted(set(composed) - set(written) - SCHEMA_DEFAULTS.get(group, set()))
    assert not unwritten, f"conf/{group}/{option}.yaml: write out {unwritten} (each with a one-line comment)"
    differing = {k: (written[k], composed[k]) for k in written if k in composed and written[k] != composed[k]}
    assert not differing, f"conf/{group}/{option}.yaml: composed values differ from the file's: {differing}"
    if group == "cluster":
        return  # a mapping: no schema fields of its own
    schema = OmegaConf.structured(DATA_SCHEMAS[option] if group == "data" else OmegaConf.structured(TrainConfig)[group])
    defaulted = sorted(k for k in written if k in schema and not OmegaConf.is_missing(schema, k))
    assert not defaulted, f"src/core/schema.py: {group} fields {defaulted} have a default there too; make them MISSING (type only)"


# Fingerprints of configs as the code before the schema composed them: a re-run sweep finds its
# recorded runs by these, so a schema that added a key or turned an int into a float would make every
# recorded run look new. An intended change of the identity updates them knowingly: `model.init` came
# with the study's init as the default, so the runs recorded before it (all GPT-2's init) are found by
# `model.init=gpt2`, and the cosine floor became `optim.min_lr_ratio` (hashed as the `optim.min_lr` it means).
RECORDED_FINGERPRINTS = {
    "model.init=gpt2": "8f44d02402f48d1f",
    # The preset's runs recorded before it took the study's attention, order, scored weights and order of
    # operations: found by those four.
    "experiment=gpt2_small_study norm=dyt model.init=gpt2 optim.decay_norm_and_bias=false optim.betas=[0.9,0.95] "
    "model.attention=sdpa data.order=drawn test_weights=final model.op_order=normsweep": "2438e1dd5cc1fe18",
    "model=gpt2_small norm=fast_dyt model.init=gpt2": "fe0c41d600447a68",
    "data=fineweb model.init=gpt2": "2ced1e0ef8e45578",
    "optim.min_lr_ratio=0 optim.tokens_per_param=20 seed=3 model.init=gpt2": "bff7b74bb8c87436",  # ints stay ints
    "": "5f7a44aa039049b9",  # the study's init: another config than any run recorded before model.init
    # Every shipped norm, as recorded before its YAML named its `_target_` (the identity leaves that out).
    **{f"norm={norm} model.init=gpt2": fp for norm, fp in (
        ("hand_layernorm", "530aa24777510508"), ("hand_rmsnorm", "e5f25f155e2e407d"), ("torch_rmsnorm", "1cd23d09748bb930"),
        ("no_norm", "4dcddc38110bca31"), ("fast_rmsnorm", "45fae4f9e9568b61"), ("torch_layernorm_nobias", "b7eb53051a00c213"),
        ("layernorm_noaffine", "2445d2afe6409210"), ("scalenorm", "8718268dd841f2ae"), ("dyt", "6406af99a8ed3a84"),
    )},  # fmt: skip
}


@pytest.mark.parametrize("overrides", list(RECORDED_FINGERPRINTS))
def test_recorded_runs_keep_their_fingerprints(overrides: str) -> None:
    assert fingerprint(compose(overrides.split())) == RECORDED_FINGERPRINTS[overrides]


def _optim(**kw: object) -> dict[str, object]:
    base = {"micro_batch_size": 12, "grad_accum": 1, "max_steps": 100, "global_batch_size": None,
            "token_budget": None, "tokens_per_param": None}
    return {**base, **kw}


def test_budget_derives_accumulation_from_global_batch() -> None:
    # The study: 96 sequences = 12 x 8 GPUs; on one GPU the same global batch needs 8 accumulation steps.
    for devices, accum in ((8, 1), (4, 2), (1, 8)):
        b = resolve_budget(_optim(global_batch_size=96), seq_len=1024, world_size=devices, n_params=1)
        assert (b.grad_accum, b.global_batch_size, b.tokens_per_step) == (accum, 96, 96 * 1024)


def test_budget_tokens_per_param_rounds_up_to_whole_steps() -> None:
    b = resolve_budget(_optim(global_batch_size=96, tokens_per_param=20), 1024, 8, n_params=163_009_536)
    assert b.max_steps == 33_165 and b.total_tokens == 3_260_252_160


def test_a_budget_below_one_step_is_refused_naming_its_field() -> None:
    # Rounded up to whole steps, 100 tokens trained one step of 12 x 1024: 123 times the budget, silently.
    with pytest.raises(ConfigError, match=r"optim\.token_budget: a budget of 100 tokens is less than one optimizer step's 12,288"):
        resolve_budget(_optim(token_budget=100), 1024, 1, n_params=1)
    with pytest.raises(ConfigError, match=r"optim\.tokens_per_param: a budget of 2,000 tokens"):
        resolve_budget(_optim(tokens_per_param=20), 1024, 1, n_params=100)
    assert resolve_budget(_optim(token_budget=12_288), 1024, 1, n_params=1).max_steps == 1  # one step exactly
    assert resolve_budget(_optim(token_budget=12_289), 1024, 1, n_params=1).max_steps == 2  # rounded up


@pytest.mark.slow  # the entry point, in this process
def test_a_budget_below_one_step_is_one_config_error_line() -> None:
    done = run_train("optim.token_budget=100", "logger=none")  # the job's own check, before it trains
    assert done.returncode == 2 and done.stderr.strip().startswith("config error: optim.token_budget: a budget of 100 tokens"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_budget_rejects_indivisible_global_batch() -> None:
    with pytest.raises(ConfigError, match="global_batch_size"):
        resolve_budget(_optim(global_batch_size=100), 1024, 8, n_params=1)


def test_warmup_cosine_end_points() -> None:
    steps, floor = 1000, 0.1
    warm = warmup_steps_for(steps, 0.05)
    assert warm == 50 and warmup_steps_for(100, 0.29) == 29 and warmup_steps_for(150, 0.05) == 7  # rounded down, as the study
    assert lr_factor(0, steps, warm, floor) == pytest.approx(1e-5)  # the study's LinearLR(start_factor=1e-5)
    assert lr_factor(warm - 1, steps, warm, floor) == pytest.approx(1 - 1 / warm, abs=1e-4)
    assert lr_factor(warm, steps, warm, floor) == pytest.approx(1)
    assert floor < lr_factor(steps - 1, steps, warm, floor) < floor + 1e-5  # toward the floor, reached a step after the last
    values = [lr_factor(s, steps, warm, floor) for s in range(warm, steps)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # monotone decay


def test_an_lr_sweep_below_the_default_floor_composes_with_no_second_override() -> None:
    # The floor follows the peak (optim.min_lr_ratio): an absolute floor of 1e-4 refused every lr below it.
    for lr in ("1e-5", "5e-5", "1e-2"):
        cfg = compose([f"optim.lr={lr}"])
        validate(cfg)
        assert cfg.optim.min_lr_ratio == 0.1
    cfg = compose(["experiment=lr_stability", "optim.lr=1e-5"])
    validate(cfg)


