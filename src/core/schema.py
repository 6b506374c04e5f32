"""The training config's schema: the types of `conf/train.yaml` and its groups, and the defaults no YAML sets.

Hydra composes `conf/train.yaml` onto `TrainConfig` (registered in Hydra's ConfigStore as
`train_schema` by `register`), and each group's YAML onto its node, so a value of the wrong type
(`seed=abc`, `optim.lr=fast`) or a key no schema knows (`model.widht=64`) fails at compose time,
naming the key, and one appended with `+` (`+optim.lrr=1`) is refused by `validate`. The values live where a Hydra user looks: every option of `model/`, `data/`,
`optim/`, `precision/` and `cluster/` writes out each value it sets, so their fields here are types
only (`MISSING`: an option that forgets one fails while composing). A default stays here only where
no YAML sets it: the top-level keys, `norm.eps`, `model.norm_placement`, `model.qk_norm`,
`model.init`, `model.attention` and `model.op_order` (one for every model), `data.order` (one for every source),
report, checkpoint, sweep and preflight.

Groups whose keys vary per option are mappings: `norm` (each norm's options are checked against its
factory's arguments by `src.model.norms.NormSpec`), `data` (each source's node below, and its
`from_config`), `cluster` (pools add `workers`, SLURM `spans_machines`) and `logger` (`none` has no
UI settings); each option of the last three merges its kind's node below (`DATA_SCHEMAS`,
`CLUSTER_SCHEMAS`, `LOGGER_SCHEMAS`), so its values are typed too. A YAML of one's own without that
line composes untyped: its values are checked by `validate` alone.

Range and cross-field checks stay in `src.training.run_spec.validate`, which runs before anything is recorded.
Torch-free, and nothing here reads a file.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, is_dataclass
from enum import StrEnum
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

# A number kept as written: `1` stays an int and `1.0` a float, since the run's fingerprint hashes
# the composed values (a float-typed field would turn an old run's `optim.min_lr=0` into 0.0).
Number = int | float

SCHEMA_NAME = "train_schema"  # the first entry of conf/train.yaml's defaults list

# Choices with no registry of their own: what Lightning's Trainer(precision=...) and
# torch.set_float32_matmul_precision accept. src.training.run_spec.validate checks them, naming the key.
LIGHTNING_PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true")
MATMUL_PRECISIONS = ("highest", "high", "medium")

NORM_EPS = 1e-5  # the same explicit eps for every variant (DyT and no_norm have none)
NORM_TARGET_KEY = "_target_"  # Hydra's key for the object a config builds: a norm of the user's (src/model/user_norms.py)
# What a norm of the user's is compared with when its YAML names no `reference` and no built-in of its
# family is swept (the report's rule, src.report.judge.pairs.pairs_for; nothing is recorded on the run).
USER_NORM_REFERENCE = "torch_layernorm"
# A norm YAML without `norm_type` (one of the user's, naming a `_target_`) is the variant its file names.
NORM_TYPE_OF_YAML = "${hydra:runtime.choices.norm}"
DEFAULT_NORM = "torch_layernorm"  # GPTConfig's norm; conf/train.yaml's defaults list picks it too (a test keeps them equal)


class ModelInit(StrEnum):
    """How the GPT's weights start (`model.init`, src.model.gpt.init_weights)."""

    STUDY = "study"  # PyTorch's constructor defaults, untouched, as the study's script leaves them
    GPT2 = "gpt2"  # GPT-2's: N(0, 0.02) weights, zero biases (Hugging Face, nanoGPT)
    NANOGPT = "nanogpt"  # gpt2, and the residual projections at std 0.02 / sqrt(2 * n_layers)


PLACEMENTS = ("pre", "post", "peri")  # where the norms sit in a block (src.model.gpt.TransformerBlock)


class Attention(StrEnum):
    """How attention is computed (`model.attention`, src.model.gpt.CausalSelfAttention): the same
    math, not the same time, so a norm's share of a step depends on it."""

    SDPA = "sdpa"  # F.scaled_dot_product_attention(is_causal=True): the fused kernel
    EXPLICIT = "explicit"  # the study's: QK^T, a -inf causal mask, softmax of the scores / sqrt(d), dropout, @V


class OpOrder(StrEnum):
    """The order of operations where the study's code computes the same function as ours in another
    order (`model.op_order`): the same math, rounded apart, so only the last bits differ."""

    # Q, K, V projections; the hand-rolled LayerNorm multiplies by its scale, then divides; a block's
    # parameters registered in forward order (norm1, att, norm2, ff)
    NORMSWEEP = "normsweep"
    # the study's gpt.py: K, Q, V projections; its LayerNorm divides, then scales; att, ff, norm1, norm2
    # registered in that order (gradient clipping sums the parameters' norms in it)
    STUDY = "study"


class ScoredWeights(StrEnum):
    """Which weights the test loss scores (`test_weights`, src.training.best_weights)."""

    FINAL = "final"  # the weights at the end of training
    BEST_TRAIN_LOSS = "best_train_loss"  # the study's: the checkpoint with the lowest mean training loss


class DataOrder(StrEnum):
    """The order of the training windows (`data.order`, src.data.windows)."""

    DRAWN = "drawn"  # window i at a start drawn from (seed, i)
    IN_ORDER = "in_order"  # the study's: consecutive windows from the split's first token, each token once


class SplitBy(StrEnum):
    """How FineWeb's documents are split into train and val (`data.split_by`, src.data.fineweb)."""

    HASH = "hash"  # each document by a hash of its text: no seed, the same in any order
    # the study's prepare_datasets.py: train[:99%] / train[99%:] of the rows of data.files, in file order
    ROW_ORDER = "row_order"


class LiteralEot(StrEnum):
    """What a literal '<|endoftext|>' inside a document is tokenized as (`data.literal_eot`, src.data.cache)."""

    TEXT = "text"  # its characters (tiktoken's encode_ordinary)
    TOKEN = "token"  # the end-of-text token, as the study's prepare_datasets.py (allowed_special)


def check_architecture(model: Any) -> None:
    """The model's shape, checked without torch (a refused config is answered before it is imported):
    `model` is a GPTConfig or the composed config's `model` group. ValueError naming the field."""
    for name in ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers"):
        value = getattr(model, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
    if model.emb_dim % model.n_heads:
        raise ValueError(f"model.emb_dim ({model.emb_dim}) must be divisible by model.n_heads ({model.n_heads})")
    if not 0.0 <= float(model.drop_rate) < 1.0:
        raise ValueError(f"model.drop_rate must be in [0, 1), got {model.drop_rate!r}")
    if model.norm_placement not in PLACEMENTS:
        raise ValueError(f"model.norm_placement: {model.norm_placement!r} is not one of {', '.join(PLACEMENTS)}")
    if not isinstance(model.qk_norm, bool):
        raise ValueError(f"model.qk_norm: must be true or false, got {model.qk_norm!r}")
    if model.init not in tuple(ModelInit):
        raise ValueError(f"model.init: {model.init!r} is not one of {', '.join(ModelInit)}")
    # A config composed before the key existed (a run's recorded config) has none: the fused kernel.
    attention = getattr(model, "attention", Attention.SDPA.value)
    if attention not in tuple(Attention):
        raise ValueError(f"model.attention: {attention!r} is not one of {', '.join(Attention)}")
    op_order = getattr(model, "op_order", OpOrder.NORMSWEEP.value)  # likewise: ours
    if op_order not in tuple(OpOrder):
        raise ValueError(f"model.op_order: {op_order!r} is not one of {', '.join(OpOrder)}")


@dataclass
class ModelSchema:
    """The GPT (src.model.gpt.GPTConfig). The architecture's values are each option's, conf/model/*.yaml;
    the two norm axes are one default for every model. Field order is the composed config's (MLflow params)."""

    norm_placement: str = "pre"  # pre (GPT-2), post (original Transformer) or peri (Peri-LN)
    qk_norm: bool = False  # true: the chosen norm also normalizes queries and keys per head
    init: str = ModelInit.STUDY.value  # one of ModelInit: the study's code never re-initializes its model
    attention: str = Attention.SDPA.value  # one of Attention: the fused kernel, or the study's explicit softmax
    op_order: str = OpOrder.NORMSWEEP.value  # one of OpOrder: ours, or the study's order of the same operations
    name: str = MISSING  # the option's name (model=<name>)
    vocab_size: int = MISSING
    context_length: int = MISSING
    emb_dim: int = MISSING
    n_heads: int = MISSING
    n_layers: int = MISSING
    drop_rate: Number = MISSING
    qkv_bias: bool = MISSING
    tie_weights: bool = MISSING


@dataclass
class MarginSchema:
    """Equivalence margins for TOST: a difference within ±margin counts as none."""

    test_loss: Number = 0.01  # nats of test loss
    speed: Number = 0.02  # relative tokens/s (0.02 = 2%)


# report.speed_kernel_s at most: an hour of kernel rounds (the check measures in seconds; a larger
# value only overflowed the check's timeout, `OverflowError: timeout is too large`, after the sweep).
SPEED_KERNEL_S_MAX = 3600


# A tracking server this sweep (or run) has already reached and that now refuses connections is
# restarting (a team server stopped and started again between two jobs): every request waits this
# long for it before the job ends with `ServerLost` (src/tracking/server_client.py). Our own team
# server takes ~13 s to start again on a quiet 2-core machine and over 20 s beside other work,
# so the wait leaves room for a busy one. A server never reached (a wrong port) is refused at once.
SERVER_RESTART_S = 60


@dataclass
class ReportSchema:
    """How `python -m src.report` and the end-of-sweep report compare variants."""

    margin: MarginSchema = field(default_factory=MarginSchema)
    pairs: Any = None  # [[a, b], ...] compared as b vs a; null = the study's (src/report/judge/pairs.py)
    # {axis: value}: the value each other value of a swept axis is compared with; null = the first run
    # (norms: the study's pairs)
    reference: Any = None
    speed_rounds: int = 0  # after a sweep: interleaved training steps of its variants (src.bench variants), rounds; 0 = off
    speed_kernel_s: Number = 8  # ...and, first, seconds of interleaved rounds of their norms' forward+backward at the run's shapes
    # The claims files judged, each in its own section: conf/claims/<name>.yaml or <config-dir>/claims/<name>.yaml
    # (src/report/read/claims.py; docs/claims.md).
    claims: list[str] = field(default_factory=lambda: ["rmsnorm_study"])
    share_rounds: int = 10  # ...and, with a trend claim chosen, rounds of its norms' share of a step per model size


@dataclass
class CheckpointSchema:
    enabled: bool = False  # write <dir>/last.ckpt every every_n_steps, at the end and on SIGTERM
    every_n_steps: int = 500
    dir: str | None = None  # null: <paths.checkpoints_dir>/<experiment>/<run_name>-<fingerprint>, found again by a re-run


@dataclass
class SweepSchema:
    """What a multirun job does when its config already has a run (docs/sweeps.md: re-running a sweep)."""

    on_existing: str = "resume"  # resume | rerun (always a new run) | fail (src.tracking.sweep.POLICIES)
    # a run to reuse or resume was made by other code: fail (stop) | rerun (train it again) | keep (reuse it)
    on_code_change: str = "fail"
    heartbeat_s: Number = 30  # a running job refreshes its heartbeat tag at most this often
    stale_after_s: Number = 300  # a RUNNING run silent this long (or whose pid is gone on this host) is lost; with a server, > heartbeat_s + SERVER_RESTART_S


@dataclass
class PreflightSchema:
    """python -m src.preflight: a run's or a sweep's checks and estimates before it starts."""

    gpu: str = "a100-80gb"  # the card each GPU job gets (a key of src/preflight/cards.py CARDS); the study's
    gpu_memory_gb: Number | None = None  # null: the card's memory; a number (GiB) overrides it
    peak_tflops: Number | None = None  # null: the card's dense peak for the run's matmuls (bf16, TF32 or fp32); CPU: needed for a time
    mfu: Number = 0.15  # assumed model FLOPs utilization: the study measured 15.2-17.0% on 8 A100s (fp16)
    memory_headroom: Number = 0.9  # share of device memory an estimate may fill (CUDA context, allocator fragmentation)
    steps: int = 0  # > 0: the dress rehearsal, this many real optimizer steps of each job on this machine
    rehearsal_micro_batch: int | None = None  # null: the largest micro-batch (at most optim.micro_batch_size) estimated to fit here


# --- the data sources (conf/data/<source>.yaml: `defaults: [/schema/data/<source>@_here_]`) --------
# Types only: each source's values and what each means are in its YAML. Field order is the composed
# config's (MLflow params): the keys every source shares first, then the source's own.


@dataclass
class DataSchema:
    """What every source has: its registry key, where its tokens are cached, how they are loaded."""

    source: str = MISSING  # key in src.data.base.DATA_SOURCES
    cache_dir: str = MISSING
    num_workers: int = MISSING  # DataLoader worker processes
    val_max_windows: int | None = MISSING  # null = the whole val split
    test_max_windows: int | None = MISSING  # null = the whole test split
    order: str = DataOrder.DRAWN.value  # one of DataOrder: training windows drawn, or consecutive as the study's


@dataclass
class ShakespeareData(DataSchema):
    """Bundled corpus: Shakespeare's 38 plays (src/assets/shakespeare-*.zip), split by whole plays."""


@dataclass
class TextFilesData(DataSchema):
    """Local corpus: a glob of .txt files (one document each) and/or .jsonl files (one {"text": ...} per line)."""

    paths: Any = MISSING  # a glob or a list of globs
    val_fraction: Number = MISSING
    test_fraction: Number = MISSING


@dataclass
class FineWebData(DataSchema):
    """FineWeb sample-10BT as GPT-2 token shards; prepared once first: python -m src.data fineweb (docs/scaling.md)."""

    dataset: str = MISSING
    subset: str = MISSING
    files: Any = MISSING  # null, a glob or a list of globs
    val_fraction: Number = MISSING
    shard_tokens: int = MISSING
    num_proc: int = MISSING
    verify_checksums: bool = MISSING
    split_by: str = MISSING  # one of SplitBy
    literal_eot: str = MISSING  # one of LiteralEot
    test_split: str = MISSING
    test_offset: int = MISSING


@dataclass
class SafetensorsData(DataSchema):
    """The study's token files (train.safetensors, validation.safetensors): its exact tokens, nothing tokenized."""

    folder: str = MISSING  # the folder holding the two files
    test_split: str = MISSING
    test_offset: int = MISSING


DATA_SCHEMAS = {"shakespeare": ShakespeareData, "text_files": TextFilesData, "fineweb": FineWebData, "safetensors": SafetensorsData}


# --- the cluster options (conf/cluster/<name>.yaml: `defaults: [/schema/cluster/<kind>@...]`) -----
# Types only, as for the data sources: the keys of each kind and nothing more, so a composed config
# (and the fingerprint of every recorded run, which the cluster is part of) is what it was untyped.


@dataclass
class ClusterSchema:
    """Where a job's processes run: Trainer(accelerator, devices, num_nodes, strategy)."""

    name: str = MISSING
    accelerator: str = MISSING
    devices: int = MISSING
    num_nodes: int = MISSING
    strategy: str = MISSING


@dataclass
class PoolCluster(ClusterSchema):
    """cpu_pool / gpu_pool: `workers` single-process jobs of a multirun at once."""

    workers: int = MISSING


@dataclass
class SlurmCluster(ClusterSchema):
    """slurm: jobs on the cluster's nodes, not on this machine."""

    spans_machines: bool = MISSING


CLUSTER_SCHEMAS = {"base": ClusterSchema, "pool": PoolCluster, "slurm": SlurmCluster}


# --- the logger options (conf/logger/<name>.yaml) ------------------------------------------------


@dataclass
class LoggerSchema:
    """Tracking on or off, and where."""

    enabled: bool = MISSING
    tracking_uri: str | None = MISSING
    artifact_location: str | None = MISSING


@dataclass
class UISchema:
    """`python -m src.ui` (make ui)."""

    host: str = MISSING
    port: int = MISSING
    workers: int | None = MISSING


@dataclass
class MlflowLogger(LoggerSchema):
    system_metrics_s: Number = MISSING
    ui: UISchema = MISSING


LOGGER_SCHEMAS = {"none": LoggerSchema, "mlflow": MlflowLogger}


@dataclass
class OptimSchema:
    """The optimizer, its schedule, the batch size and the training budget (values: conf/optim/*.yaml)."""

    name: str = MISSING  # the option's name (optim=<name>): a sweep over options is named by it
    lr: Number = MISSING
    min_lr_ratio: Number = MISSING
    betas: list[float] = MISSING  # floats: OmegaConf 2.3 iterates a list of Number as its nodes
    eps: Number = MISSING
    weight_decay: Number = MISSING
    decay_norm_and_bias: bool = MISSING
    warmup_fraction: Number = MISSING
    grad_clip: Number | None = MISSING
    micro_batch_size: int = MISSING
    grad_accum: int = MISSING
    global_batch_size: int | None = MISSING
    max_steps: int = MISSING
    token_budget: Number | None = MISSING  # 3.26e9 reads well: rounded up to whole steps
    tokens_per_param: Number | None = MISSING


@dataclass
class PrecisionSchema:
    """Values: conf/precision/*.yaml."""

    name: str = MISSING
    lightning: str = MISSING  # Trainer(precision=...): one of LIGHTNING_PRECISIONS
    matmul_precision: str = MISSING  # torch.set_float32_matmul_precision: one of MATMUL_PRECISIONS


@dataclass
class PathsSchema:
    """Where runs write (values: conf/paths/default.yaml)."""

    root_dir: str = MISSING
    cache_dir: str = MISSING
    mlflow_db: str = MISSING
    mlflow_artifacts: str = MISSING
    reports_dir: str = MISSING
    checkpoints_dir: str = MISSING


@dataclass
class TrainConfig:
    """`python -m src.train`'s config. Field order is the composed config's: it orders the MLflow
    params and the run's config.yaml, as before the schema existed."""

    # + conf/norm/<key>.yaml; a norm YAML of one's own that names a `_target_` takes its name as its key
    norm: dict[str, Any] = field(default_factory=lambda: {"eps": NORM_EPS, "norm_type": NORM_TYPE_OF_YAML})
    model: ModelSchema = field(default_factory=ModelSchema)
    seed: int = 0  # in [0, 2**32 - 1]: numpy's generator takes an unsigned 32-bit integer
    experiment_name: str = "normsweep"  # one MLflow experiment per sweep; experiment configs set their own
    run_name: str = "${norm.norm_type}-s${seed}"
    seq_len: int = "${model.context_length}"  # type: ignore[assignment]  # training/eval window; at most model.context_length
    val_every_n_steps: int = 50  # optimizer steps between validations
    log_every_n_steps: int = 1  # optimizer steps between logged train metrics
    progress_bar: bool = True
    compile: bool = False  # torch.compile each transformer block; the first step's time is reported apart
    deterministic: bool = False  # Lightning's deterministic mode (torch deterministic algorithms); slower, recorded as a tag
    test_weights: str = ScoredWeights.FINAL.value  # one of ScoredWeights: the weights the test loss scores
    report: ReportSchema = field(default_factory=ReportSchema)
    checkpoint: CheckpointSchema = field(default_factory=CheckpointSchema)
    ckpt_path: str | None = None  # resume: "last" (= <checkpoint.dir>/last.ckpt) or a .ckpt path
    resume: bool = False  # same as ckpt_path=last
    sweep: SweepSchema = field(default_factory=SweepSchema)
    preflight: PreflightSchema = field(default_factory=PreflightSchema)
    data: dict[str, Any] = field(default_factory=dict)  # conf/data/<source>.yaml: one of DATA_SCHEMAS
    optim: OptimSchema = field(default_factory=OptimSchema)
    cluster: dict[str, Any] = field(default_factory=dict)  # conf/cluster/<name>.yaml: one of CLUSTER_SCHEMAS
    precision: PrecisionSchema = field(default_factory=PrecisionSchema)
    logger: dict[str, Any] = field(default_factory=dict)  # conf/logger/<name>.yaml: one of LOGGER_SCHEMAS
    paths: PathsSchema = field(default_factory=PathsSchema)


def schema_of(node: DictConfig) -> type | None:
    """The dataclass a schema-typed node was composed onto; None for a mapping group (`norm`, or a
    `cluster`/`logger`/`data` YAML of one's own without its schema line: each option's keys are its own)."""
    kind = OmegaConf.get_type(node)
    return kind if isinstance(kind, type) and is_dataclass(kind) else None


def unknown_key_line(key: str, valid: tuple[str, ...] | list[str]) -> str:
    """`optim.lrr: no such key; did you mean optim.lr? (optim's keys: name, lr, min_lr_ratio, ...)`."""
    parent, _, leaf = key.rpartition(".")
    where = f"{parent}'s" if parent else "the config's"
    near = difflib.get_close_matches(leaf, valid, n=1)
    guess = f"; did you mean {parent + '.' if parent else ''}{near[0]}?" if near else ""
    return f"{key}: no such key{guess} ({where} keys: {', '.join(valid)})"


def register() -> None:
    """Put the schema in Hydra's ConfigStore, where conf/train.yaml's defaults list finds it (Hydra's
    plugin scan calls this through hydra_plugins/normsweep_schema, before any config is composed)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name=SCHEMA_NAME, node=TrainConfig)
    groups = {"data": DATA_SCHEMAS, "cluster": CLUSTER_SCHEMAS, "logger": LOGGER_SCHEMAS}
    for group, schemas in groups.items():  # conf/<group>/<name>.yaml: defaults: [/schema/<group>/<kind>@...]
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node)
