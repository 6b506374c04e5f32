"""A training config checked and resolved once: the one object a run is built from.

Types are the schema's (src/core/schema.py): Hydra refuses a value of the wrong type while composing.
What a type cannot say is checked here (`validate`), before any MLflow run is opened: ranges, choices,
and values that depend on each other or on a registry (the tokenizer, the norms, the sweep policies),
so a bad value fails fast with a message naming the field, and nothing is recorded for it.

`train()` receives a Hydra `DictConfig`; rather than let it travel into every helper, `resolve`
validates it and reads, once, what each stage uses: the model's `GPTConfig`, the data, the optimizer,
the Trainer's settings, checkpointing, the run plan, the device checks and the tracking record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from src.core.budget import Budget, resolve_budget
from src.core.cli import in_multirun
from src.core.devices import DeviceSpec, ModelSize, check_device, check_memory_floor
from src.core.norm_yamls import known_variants, without_shipped_target
from src.core.paths import CONF_DIR, ConfigError, require_writable, user_config_dirs
from src.core.schema import (
    LIGHTNING_PRECISIONS,
    MATMUL_PRECISIONS,
    SERVER_RESTART_S,
    SPEED_KERNEL_S_MAX,
    DataOrder,
    ModelSchema,
    ScoredWeights,
    check_architecture,
    schema_of,
    unknown_key_line,
)
from src.data.base import check_data, check_loader_values
from src.data.tokenizer import VOCAB_SIZE
from src.tracking.checkpoint_file import read_run_state, resolve_ckpt_path
from src.tracking.identity import CheckpointSpec, Identity, check_checkpoint, checkpoint_folder
from src.tracking.record import RecordSpec, StoreSpec
from src.tracking.store import NAME_MAX
from src.tracking.store_uri import check_uri, check_uri_text, is_server
from src.tracking.sweep import CODE_POLICIES, POLICIES
from src.tracking.tags import (
    NORM_EPS_TAG,
    NORM_FILE_HASH_TAG,
    NORM_FILE_TAG,
    NORM_PACKAGE_TAG,
    NORM_PARAMS_TAG,
    NORM_PROJECT_CODE_TAG,
    NORM_REFERENCE_TAG,
    NORM_TARGET_TAG,
)
from src.tracking.variants import AXES_ENV, axes_from_env

if TYPE_CHECKING:  # the model's module imports torch: a refused config is answered without it
    from src.model.gpt import GPTConfig
    from src.tracking.code import CodeState

# Seeds seed numpy too, whose generator takes an unsigned 32-bit integer.
SEED_RANGE = (0, 2**32 - 1)
# Keys of the norm group that are not options of the norm: `family` labels it for the report.
NORM_KEYS = ("norm_type", "eps", "family")


def model_config(cfg: DictConfig) -> GPTConfig:
    """The GPTConfig of a composed training config (model group + norm group).

    Every check of the norm (its key, eps, options) happens once, in `src.model.norms.NormSpec`, which
    GPTConfig builds; its ValueError names the `norm.` field and becomes a ConfigError here.
    """
    from src.model.gpt import GPTConfig

    m = cfg.model
    norm = OmegaConf.to_container(cfg.norm, resolve=True)
    assert isinstance(norm, dict)
    norm = without_shipped_target(norm)  # a shipped norm is found by its key, as GPTConfig(norm_type=...) finds it
    try:
        return GPTConfig(
            vocab_size=m.vocab_size,
            context_length=m.context_length,
            emb_dim=m.emb_dim,
            n_heads=m.n_heads,
            n_layers=m.n_layers,
            drop_rate=float(m.drop_rate),
            qkv_bias=bool(m.qkv_bias),
            tie_weights=bool(m.tie_weights),
            norm_type=norm["norm_type"],
            norm_eps=norm["eps"],
            norm_options={k: v for k, v in norm.items() if k not in NORM_KEYS},
            norm_placement=m.norm_placement,
            qk_norm=m.qk_norm,
            init=m.init,
            attention=m.get("attention", ModelSchema.attention),  # a config recorded before the key: none
            op_order=m.get("op_order", ModelSchema.op_order),  # likewise
        )
    except ValueError as err:  # the line names the norm's YAML
        raise ConfigError(f"{norm_yaml(cfg)}: {err}") from None


def norm_yaml(cfg: DictConfig) -> str:
    """`norm=my_norm (/home/me/my_conf/norm/my_norm.yaml)`: the norm YAML a config chose, with its file
    when it comes from a folder on Hydra's search path (`--config-dir`, `hydra.searchpath`)."""
    name = str(cfg.norm.get("norm_type"))
    found = [path for folder in user_config_dirs() if (path := folder / "norm" / f"{name}.yaml").is_file()]
    return f"norm={name} ({found[0]})" if found else f"norm={name}"


def refuse_renamed_norm(cfg: DictConfig) -> None:
    """`norm.norm_type` is the name of the norm YAML Hydra chose, where the choice is known (a Hydra app,
    or a config composed with its `hydra` node): `norm.norm_type=batchnorm` over torch_layernorm's YAML
    would train nn.LayerNorm under a name of its own. A norm of the user's is a YAML of its own."""
    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None)
    if choices is None and HydraConfig.initialized():
        choices = HydraConfig.get().runtime.choices
    chosen = choices.get("norm") if choices is not None else None
    if chosen is not None and str(cfg.norm.get("norm_type")) != str(chosen):
        _require_choice(str(cfg.norm.get("norm_type")), tuple(known_variants()), "norm.norm_type")


def refuse_shadowed_norm(cfg: DictConfig) -> None:
    """A norm YAML of the user's named as a built-in one is never read (conf/ comes first on Hydra's
    search path): the run would train the built-in under the user's name for it. Refused, naming both."""
    name = str(cfg.norm.get("norm_type"))
    builtin = CONF_DIR / "norm" / f"{name}.yaml"
    if not builtin.is_file():
        return
    for path in (folder / "norm" / f"{name}.yaml" for folder in user_config_dirs()):
        if path.is_file():
            raise ConfigError(
                f"norm={name} ({path}): {name!r} is a built-in variant's name ({builtin}), which Hydra reads instead; "
                "a norm of your own needs a name of its own: rename its YAML"
            )


def check_user_norm(cfg: DictConfig, model: GPTConfig) -> None:
    """A norm of the user's, run on a random batch at the model's widths under the run's precision
    (src/model/user_norms.py): once per variant and process, before anything is recorded."""
    try:
        model.norm.check_at(model.norm_widths, str(cfg.precision.lightning))
    except ValueError as err:
        raise ConfigError(f"{norm_yaml(cfg)}: {err}") from None


def user_norm_record(model: GPTConfig, record: RecordSpec) -> RecordSpec:
    """A user norm's provenance on its run: tags (import path, file and hash or package, parameters,
    eps) and its code joined to the run's code fingerprint. A built-in's record as it is."""
    source = model.norm.source
    if source is None:
        return record
    import torch

    from src.model.gpt import count_params

    with torch.device("meta"):
        n_params = count_params(model.norm.build(model.emb_dim, "attn"))
    tags = {
        NORM_TARGET_TAG: source.target,
        NORM_FILE_TAG: source.file,
        NORM_FILE_HASH_TAG: source.file_sha256,
        NORM_PACKAGE_TAG: source.package,
        NORM_PARAMS_TAG: str(n_params),
        NORM_EPS_TAG: f"{model.norm.eps:g}" if model.norm.takes_eps else "not taken",
        NORM_REFERENCE_TAG: source.reference,
        NORM_PROJECT_CODE_TAG: record.code.fingerprint,  # the report reads which project code made it
    }
    tags = {**record.tags, **{k: v for k, v in tags.items() if v}}
    return replace(record, tags=tags, code=with_norm_code(record.code, model))


def with_norm_code(code: CodeState, model: GPTConfig) -> CodeState:
    """`code` with a norm of the user's beside it (its file, or its package's version); a built-in's as it is."""
    source = model.norm.source
    return code if source is None else code.joined(*source.code())


def _require(ok: bool, field: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{field}: {message}")


def _require_choice(value: object, choices: tuple[str, ...], field: str) -> None:
    _require(value in choices, field, f"{value!r} is not one of the valid choices: {', '.join(choices)}")


def appended_keys(cfg: DictConfig, prefix: str = "") -> list[tuple[str, tuple[str, ...], str]]:
    """(key, its node's keys, its node's schema) for each key appended with `+` (`+optim.lrr=1`) under
    a schema-typed node that its dataclass lacks: Hydra appends it, and the run would train as if it
    were not there (code reads a typed node's fields). The top level is left out: an appended
    top-level key is how replicates of one config are swept (`+probe=1,2`), and a sweep of one is
    warned about (src/launch/unread_keys.py)."""
    found: list[tuple[str, tuple[str, ...], str]] = []
    for key in cfg:
        if not prefix and key == "hydra":  # Hydra's own config, typed by Hydra and its plugins
            continue
        node = cfg._get_node(key)
        if not isinstance(node, DictConfig) or node._is_missing() or node._is_none():
            continue
        path, kind = f"{prefix}{key}", schema_of(node)
        if kind is not None:
            valid = tuple(f.name for f in fields(kind))
            found += [(f"{path}.{k}", valid, kind.__name__) for k in node if k not in valid]
        found += appended_keys(node, f"{path}.")
    return found


# Names every Lightning 2.x takes: a config that uses one is checked without importing Lightning
# (seconds, and torch with it). Any other name is looked up in Lightning's own registries.
COMMON_NAMES = {"strategy": ("auto", "ddp", "fsdp", "deepspeed"), "accelerator": ("auto", "cpu", "gpu", "cuda", "mps")}


def lightning_names(kind: str, name: str | None = None) -> tuple[str, ...]:
    """What Trainer(strategy=...) / Trainer(accelerator=...) takes by name (Lightning's registries),
    without the spawned strategies this entry point refuses; for a `name` Lightning always takes,
    the common names alone."""
    if name in COMMON_NAMES[kind]:
        return COMMON_NAMES[kind]
    if kind == "strategy":
        from lightning.pytorch.strategies import StrategyRegistry

        names = [n for n in StrategyRegistry.available_strategies() if not any(k in n for k in ("spawn", "fork", "notebook"))]
        return ("auto", *names)
    from lightning.pytorch.accelerators import AcceleratorRegistry

    return ("auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators()))


def validate_names(cfg: DictConfig) -> None:
    """Names become MLflow names (kept as written) and folder names (mapped to safe ones)."""
    for field in ("experiment_name", "run_name"):
        value = cfg.get(field)
        _require(bool(value.strip()), field, f"must be a non-empty string, got {value!r}")
        _require(len(value) <= NAME_MAX, field, f"at most {NAME_MAX} characters, got {len(value)}")


def check_store_placement(cfg: DictConfig) -> None:
    """A SQLite file takes the writers of one machine: refuse jobs whose ranks or jobs span machines."""
    uri = str(OmegaConf.select(cfg, "logger.tracking_uri", default=None) or "")
    if not OmegaConf.select(cfg, "logger.enabled", default=False) or not uri.startswith("sqlite:"):
        return
    c = cfg.cluster
    nodes = int(c.get("num_nodes", 1))
    _require(
        nodes <= 1 and not c.get("spans_machines", False),
        "logger.tracking_uri",
        f"{uri} is a SQLite file, but cluster={c.get('name', '?')} runs on {nodes} node(s) per job"
        f"{' on other machines' if c.get('spans_machines', False) else ''}, and SQLite's locks do not hold on a "
        "shared filesystem; start a team server (make server, docs/store.md#a-team-server) and set "
        "logger.tracking_uri=http://<server>:<port>",
    )


def validate(cfg: DictConfig) -> GPTConfig:
    """Check every value that would otherwise fail mid-training; returns the model config."""
    check_values(cfg)
    # Last: the norm's options are checked by building its layers (on the meta device), with torch;
    # a norm of the user's is also run at the model's width.
    model = model_config(cfg)
    check_user_norm(cfg, model)
    return model


def check_values(cfg: DictConfig) -> None:
    """Every check of the config's values that needs neither torch nor Lightning nor the store: a
    refused value is answered before they are imported (seconds; tens of them on a loaded machine)."""
    for key, valid, kind in appended_keys(cfg):  # `+optim.lrr=1`: Hydra appends it, the run never reads it
        raise ConfigError(f"{unknown_key_line(key, valid)}; `+` cannot add one: its keys are its schema's ({kind}, src/core/schema.py)")
    seed = cfg.seed
    _require(SEED_RANGE[0] <= seed <= SEED_RANGE[1], "seed", f"must be an integer in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {seed}")
    validate_names(cfg)
    try:
        check_architecture(cfg.model)  # before the model's module, which imports torch
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _require(
        cfg.model.vocab_size >= VOCAB_SIZE,
        "model.vocab_size",
        f"must be >= the tokenizer's {VOCAB_SIZE} tokens, got {cfg.model.vocab_size}",
    )
    refuse_renamed_norm(cfg)
    refuse_shadowed_norm(cfg)
    family = cfg.norm.get("family")  # the norm group is a mapping: each norm's keys are its own
    _require(
        isinstance(family, str) and family != "",
        "norm.family",
        f"every conf/norm YAML names its family (layernorm, rmsnorm, dyt, scalenorm, none, or a new one), got {family!r}",
    )
    o = cfg.optim
    _require(o.lr > 0, "optim.lr", f"must be > 0, got {o.lr}")
    _require(0 <= o.min_lr_ratio <= 1, "optim.min_lr_ratio", f"must be in [0, 1] (a fraction of optim.lr), got {o.min_lr_ratio}")
    _require(0 <= o.warmup_fraction < 1, "optim.warmup_fraction", f"must be in [0, 1), got {o.warmup_fraction}")
    _require(o.weight_decay >= 0, "optim.weight_decay", f"must be >= 0, got {o.weight_decay}")
    _require(
        len(o.betas) == 2 and all(0 <= b < 1 for b in o.betas), "optim.betas", f"need two values in [0, 1), got {list(o.betas)}"
    )
    _require(o.grad_clip is None or o.grad_clip > 0, "optim.grad_clip", f"must be > 0 or null, got {o.grad_clip}")
    _require(o.micro_batch_size >= 1, "optim.micro_batch_size", f"must be >= 1, got {o.micro_batch_size}")
    _require(o.grad_accum >= 1, "optim.grad_accum", f"must be >= 1, got {o.grad_accum}")
    _require(o.max_steps >= 1, "optim.max_steps", f"must be >= 1, got {o.max_steps}")
    for field in ("token_budget", "tokens_per_param", "global_batch_size"):
        value = o.get(field)
        _require(value is None or value > 0, f"optim.{field}", f"must be > 0 or null, got {value}")
    _require(
        1 <= cfg.seq_len <= cfg.model.context_length,
        "seq_len",
        f"must be in [1, model.context_length={cfg.model.context_length}], got {cfg.seq_len}",
    )
    rounds = cfg.report.speed_rounds
    _require(
        rounds == 0 or rounds >= 2,
        "report.speed_rounds",
        f"must be 0 (no speed check after a sweep) or an integer >= 2 (an interval needs two rounds), got {rounds}",
    )
    share_rounds = cfg.report.share_rounds
    _require(
        share_rounds == 0 or share_rounds >= 2,
        "report.share_rounds",
        f"must be 0 (no norm-share rounds) or an integer >= 2 (an interval needs two rounds), got {share_rounds}",
    )
    kernel_s = cfg.report.speed_kernel_s
    _require(
        0 <= kernel_s <= SPEED_KERNEL_S_MAX,
        "report.speed_kernel_s",
        f"must be a number of seconds in [0, {SPEED_KERNEL_S_MAX}], got {kernel_s}",
    )
    _require(cfg.val_every_n_steps >= 1, "val_every_n_steps", f"must be >= 1, got {cfg.val_every_n_steps}")
    _require(cfg.log_every_n_steps >= 1, "log_every_n_steps", f"must be >= 1, got {cfg.log_every_n_steps}")
    # 0 would turn the periodic checkpoints off without a word (Lightning's every_n_train_steps=0).
    every = cfg.checkpoint.every_n_steps
    _require(every >= 1, "checkpoint.every_n_steps", f"must be >= 1 (checkpoint.enabled=false writes none), got {every}")
    _require_choice(cfg.test_weights, tuple(ScoredWeights), "test_weights")
    _require_choice(cfg.data.get("order", DataOrder.DRAWN.value), tuple(DataOrder), "data.order")
    d = cfg.data
    check_loader_values(d.get("val_max_windows"), d.get("test_max_windows"), int(d.get("num_workers", 0)), int(d.get("test_offset", 0)))
    _require_choice(cfg.precision.lightning, LIGHTNING_PRECISIONS, "precision.lightning")
    _require_choice(cfg.precision.matmul_precision, MATMUL_PRECISIONS, "precision.matmul_precision")
    # Spawned workers keep the results (losses, timings) in their own memory: this entry point runs
    # DDP through processes it is part of (Lightning's launcher, torchrun or SLURM).
    _require(
        not any(k in str(cfg.cluster.strategy) for k in ("spawn", "fork")),
        "cluster.strategy",
        f"{cfg.cluster.strategy!r} is not supported; use ddp (or auto for one device)",
    )
    sw = cfg.sweep
    _require_choice(sw.on_existing, POLICIES, "sweep.on_existing")
    _require_choice(sw.on_code_change, CODE_POLICIES, "sweep.on_code_change")
    for field in ("heartbeat_s", "stale_after_s"):
        _require(sw[field] > 0, f"sweep.{field}", f"must be > 0, got {sw[field]}")
    _require(sw.stale_after_s > sw.heartbeat_s, "sweep.stale_after_s", f"must exceed sweep.heartbeat_s={sw.heartbeat_s}")
    if cfg.logger.enabled and is_server(str(cfg.logger.tracking_uri)):
        # A job waiting out its server's restart writes no heartbeat; silent for less than that wait
        # and one heartbeat, it still runs, and another copy of the sweep must not take its job.
        quiet_s = SERVER_RESTART_S + sw.heartbeat_s
        _require(
            sw.stale_after_s > quiet_s,
            "sweep.stale_after_s",
            f"must exceed {quiet_s:g} s with a tracking server: sweep.heartbeat_s={sw.heartbeat_s} plus the "
            f"{SERVER_RESTART_S} s a job waits for its restarting server, during which it writes no heartbeat "
            "and would be taken for lost",
        )
    _require(cfg.cluster.devices >= 1, "cluster.devices", f"must be >= 1, got {cfg.cluster.devices}")
    _require(cfg.cluster.num_nodes >= 1, "cluster.num_nodes", f"must be >= 1, got {cfg.cluster.num_nodes}")
    if cfg.logger.enabled:  # its text, as the other values: what the store answers is asked when it is opened
        check_uri_text(str(cfg.logger.tracking_uri))
    check_store_placement(cfg)
    if "workers" in cfg.cluster:  # cpu_pool / gpu_pool: single-process jobs side by side (src/launch/pool.py)
        c = cfg.cluster
        _require(c.workers >= 1, "cluster.workers", f"must be >= 1, got {c.workers}")
        # DDP ranks could not pair up across workers that pick their jobs at run time.
        _require(
            c.devices == 1 and c.num_nodes == 1,
            "cluster.devices",
            f"cluster={c.name} runs one process per job: cluster.devices and cluster.num_nodes must be 1, "
            f"got {c.devices} x {c.num_nodes}; for DDP jobs use cluster=gpu_node (one job per command) or cluster=slurm",
        )
    _require_choice(cfg.cluster.strategy, lightning_names("strategy", cfg.cluster.strategy), "cluster.strategy")
    _require_choice(cfg.cluster.accelerator, lightning_names("accelerator", cfg.cluster.accelerator), "cluster.accelerator")


@dataclass(frozen=True)
class TrainSpec:
    """What the data, the optimizer and the Trainer read: the `data` and `optim` groups, the context
    length, and the loop's settings."""

    data: DictConfig  # the data group (src.data.datamodule.build_datamodule reads it)
    optim: dict[str, Any]  # the optim group, resolved
    seq_len: int
    strategy: str
    deterministic: bool
    val_every_n_steps: int
    log_every_n_steps: int
    compile: bool
    progress_bar: bool
    test_weights: str = ScoredWeights.FINAL.value  # a ScoredWeights: which weights the test loss scores

    @property
    def micro_batch_size(self) -> int:
        return int(self.optim["micro_batch_size"])

    @classmethod
    def of(cls, cfg: DictConfig) -> TrainSpec:
        optim = OmegaConf.to_container(cfg.optim, resolve=True)
        assert isinstance(optim, dict)
        return cls(
            data=cfg.data,
            optim={str(k): v for k, v in optim.items()},
            seq_len=int(cfg.seq_len),
            strategy=cfg.cluster.strategy,
            deterministic=bool(cfg.get("deterministic", False)),
            val_every_n_steps=int(cfg.val_every_n_steps),
            log_every_n_steps=int(cfg.log_every_n_steps),
            compile=bool(cfg.compile),
            progress_bar=bool(cfg.progress_bar),
            test_weights=str(cfg.test_weights),
        )


@dataclass(frozen=True)
class RunSpec:
    """The one object a run is built from, past `resolve`: no stage reads the DictConfig again."""

    run_name: str  # the job's one name in every line and its MLflow run's: `record.run_name` (see `shown_name`)
    seed: int
    model: GPTConfig
    identity: Identity
    checkpoint: CheckpointSpec
    devices: DeviceSpec
    store: StoreSpec
    train: TrainSpec
    record: RecordSpec  # what the Tracker writes to MLflow: tags, params, the config as YAML
    budget: Budget  # how long it trains: steps, accumulation, tokens

    @property
    def shown_name(self) -> str:
        """The name its MLflow run gets (the variant apart, `hand_layernorm · pre-s0`), which every line
        of the job uses: cfg.run_name alone cannot tell the runs of a norm × placement sweep apart."""
        return self.run_name


def check_artifact_location(location: str | None) -> None:
    """A local artifact folder must be writable from here: MLflow writes a run's artifacts (its
    config, a sweep's report) there from the process that records it."""
    if location and "://" not in location:
        require_writable(
            Path(location), "logger.artifact_location",
            f"MLflow writes the runs' artifacts to {location}: point paths.mlflow_artifacts (or logger.artifact_location) at a writable folder",
        )  # fmt: skip


def check_report_folder(cfg: DictConfig) -> None:
    """A sweep's report folder must be writable before its first job trains, not after its last."""
    require_writable(
        Path(cfg.paths.reports_dir), "paths.reports_dir",
        "the sweep's report is written there when the sweep ends: point paths.reports_dir at a writable folder",
    )  # fmt: skip


def hydra_context() -> tuple[list[str], int | None]:
    """The command-line overrides and the multirun job number, when running under Hydra."""
    if not HydraConfig.initialized():
        return [], None
    hc = HydraConfig.get()
    return list(hc.overrides.task), OmegaConf.select(hc, "job.num", default=None)


@dataclass(frozen=True)
class CheckedJob:
    """A config past `check_job`: what its values, paths and files decide, before the model's module."""

    train: TrainSpec
    store: StoreSpec
    identity: Identity
    checkpoint: CheckpointSpec
    devices: DeviceSpec


def check_job(cfg: DictConfig, trains_here: bool = True) -> CheckedJob:
    """Everything `resolve` checks that neither torch nor the store needs (ConfigError naming the field):
    its values, then what the paths and files decide. A sweep's start runs it on each job as the job
    is composed, so a refusal the jobs share answers at the first, whatever the sweep's size."""
    check_values(cfg)
    train, store = TrainSpec.of(cfg), StoreSpec.of(cfg)
    ck, wanted = cfg.checkpoint, cfg.get("ckpt_path")
    identity = Identity.of(cfg)
    checkpoint = CheckpointSpec(
        enabled=bool(ck.enabled),
        every_n_steps=int(ck.every_n_steps),
        folder=checkpoint_folder(cfg, identity),
        resume_from="last" if wanted is None and cfg.get("resume") else wanted,
        placed_by="checkpoint.dir" if ck.get("dir") else "paths.checkpoints_dir",
    )
    devices = DeviceSpec.of(cfg)
    if store.enabled:
        check_uri(store.tracking_uri)  # its file: a folder, read-only, a driver missing (the store re-checks as it opens)
    resolve_budget(train.optim, train.seq_len, devices.world_size, 0)  # its steps (a budget per parameter: in resolve)
    if trains_here:
        check_device(devices)
        # The floor's logits alone (no parameters counted yet): a micro-batch or a context far too large.
        floor = ModelSize(0, cfg.model.vocab_size, cfg.model.context_length, cfg.model.emb_dim)
        check_memory_floor(floor, train.micro_batch_size, train.seq_len, devices.precision, devices.device_type)
    if trains_here:  # the data as this machine has it (a cluster's nodes may have folders a login node lacks)
        check_data(OmegaConf.to_container(cfg.data, resolve=True))  # type: ignore[arg-type]
    if trains_here and checkpoint.enabled:  # its first write would otherwise fail the run at the first checkpoint
        field = checkpoint.placed_by
        require_writable(checkpoint.folder, field, f"checkpoints go to {checkpoint.folder}: point {field} at a writable folder")
    if trains_here and store.enabled:
        check_artifact_location(store.artifact_location)
    if not in_multirun():  # a single run's checkpoint: this config's, by its record (a sweep's jobs: each as it starts)
        given = resolve_ckpt_path(checkpoint)
        if given is not None:
            check_checkpoint(given, identity.fingerprint, identity.config, read_run_state(given))
    return CheckedJob(train, store, identity, checkpoint, devices)


def check_model(cfg: DictConfig, checked: CheckedJob, trains_here: bool = True) -> tuple[GPTConfig, Budget]:
    """What `resolve` checks with the model's module (torch): the norm's options, the model's size
    against the memory floor, the token budget of each parameter. A sweep's start runs it on every job
    before launch; the job's `resolve` runs it again with the run's record, which only the job needs."""
    train, devices = checked.train, checked.devices
    model = model_config(cfg)
    check_user_norm(cfg, model)
    from src.model.gpt import parameter_count

    size = ModelSize(parameter_count(model), model.vocab_size, model.context_length, model.emb_dim)
    if trains_here:
        check_memory_floor(size, train.micro_batch_size, train.seq_len, devices.precision, devices.device_type)
    return model, resolve_budget(train.optim, train.seq_len, devices.world_size, size.n_params)


def resolve(cfg: DictConfig, trains_here: bool = True, checked: CheckedJob | None = None) -> RunSpec:
    """Validate `cfg` (ConfigError naming the field) and split it into the stages' pieces, with the
    model's size and the token budget. What takes a second to check on the machine that trains (the
    device, its memory, the checkpoint folder) is checked here too, before anything is recorded; a
    launcher that resolves its jobs elsewhere (`trains_here=False`, a SLURM login node without GPUs)
    leaves that to the job. `checked`: this config's `check_job`, already run."""
    c = checked or check_job(cfg, trains_here)
    train, store, identity, checkpoint, devices = c.train, c.store, c.identity, c.checkpoint, c.devices
    model, budget = check_model(cfg, c, trains_here)
    overrides, job_num = hydra_context()
    axes = os.environ.get(AXES_ENV)  # what the sweep varied (src.launch.callbacks sets it)
    record = RecordSpec.from_config(cfg, identity.params, axes_from_env(axes), overrides, job_num)
    record = user_norm_record(model, record)  # a norm of the user's: its provenance, its code
    return RunSpec(
        # The MLflow run's name (`lr=0.001-s0` in a learning-rate sweep), not cfg.run_name's `<norm>-s<seed>`:
        # a SIGTERM line named the job `torch_layernorm-s0` while its run and its other lines said `lr=0.001-s0`.
        run_name=record.run_name,
        seed=cfg.seed,
        model=model,
        identity=identity,
        checkpoint=checkpoint,
        devices=devices,
        store=store,
        train=train,
        record=record,
        budget=budget,
    )
