"""A run's identity: the part of its config that can change its result, and a fingerprint of it.

Two jobs with the same fingerprint train the same model on the same tokens and must end at the
same numbers, so a re-run sweep can skip, resume or replace a run instead of duplicating it, and a
checkpoint can be checked against the config that wants to resume it. Torch-free.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from src.core.norm_yamls import without_shipped_target
from src.core.paths import ConfigError

# Keys that cannot change a run's result, so they are left out of its identity (and of its MLflow
# params): where things are written, where they are tracked, how often progress is shown or
# evaluated, how the run is resumed or named, and the sweep policy. Everything else is identity.
NON_RESULT_KEYS = (
    "paths",  # output locations
    "logger",  # tracking location (and maybe credentials)
    "checkpoint",  # where and how often state is saved
    "ckpt_path",
    "resume",
    "sweep",  # what to do with existing runs
    "report",  # how results are compared afterwards
    "preflight",  # estimates made before a run (python -m src.preflight)
    "norm_sets",  # configs before the presets wrote out their norm lists had it: their fingerprints stay
    "experiment_name",  # the search scope itself
    "run_name",  # derived from norm and seed
    "progress_bar",
    "log_every_n_steps",  # logging cadence
    "val_every_n_steps",  # evaluation cadence: validation draws no training randomness
    "data.cache_dir",
    "data.num_workers",  # windows are seeded per index, whatever process reads them
)

# `model.init` came after runs were recorded; every one of them started from GPT-2's init. At that
# value the key is left out of the fingerprint, so those runs are still this config's runs (the run's
# MLflow params show it all the same); at any other value the config is another one.
INIT_KEY, INIT_BEFORE_THE_KEY = "model.init", "gpt2"
# Keys added after runs were recorded, each with the one value those runs had: at that value a key is
# left out of the fingerprint, so a re-run of an old sweep still finds its finished runs. The keys
# after `model.init` kept that value as their default (the fused attention, drawn windows, the final
# weights scored, the optimizer option's name, our order of operations, FineWeb's hash split and its
# literal end-of-text read as text); only the study preset takes the study's, and of these only the
# model's and training's (its data choices need the study's own files).
ADDED_LATER = {
    INIT_KEY: INIT_BEFORE_THE_KEY,
    "model.attention": "sdpa",
    "data.order": "drawn",
    "test_weights": "final",
    "model.op_order": "normsweep",
    "data.split_by": "hash",  # these two are FineWeb's: other sources have neither key
    "data.literal_eot": "text",
    "optim.name": "adamw",  # the option's name, so a sweep over optim options is named by it
}
# Keys that name values the identity holds already (an option's name: `optim=adamw_study` is its
# betas, decay and clip): never in the fingerprint, so the study preset's runs, recorded before the
# name, are still its runs; recorded as params all the same, which name a sweep's variants.
LABEL_KEYS = ("optim.name",)
# Such a run's init as the report names it, wherever it does (variants, headline, the study's code line).
INIT_RECORDED_BEFORE = f"{INIT_BEFORE_THE_KEY} (recorded before {INIT_KEY})"

FINGERPRINT_CHARS = 16
LAST = "last.ckpt"  # a run's checkpoint, in its folder: the end state, or where it stopped
RUN_STATE_KEY = "RunTracking"  # the tracking callback's entry in checkpoint["callbacks"]: its run id and identity
MAX_FOLDER_NAME = 80


def identity_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without NON_RESULT_KEYS."""
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    container.pop("hydra", None)
    if isinstance(container.get("norm"), dict):  # a shipped norm's `_target_` is the project's code, not config
        container["norm"] = without_shipped_target(container["norm"])
    for key in NON_RESULT_KEYS:
        *parents, leaf = key.split(".")
        node: Any = container
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return container


def fingerprint(cfg: DictConfig | Mapping[str, Any]) -> str:
    """A stable hash of the run's identity (key order and YAML formatting do not matter)."""
    return _digest(identity_config(cfg))


def recorded_min_lr(lr: float, ratio: float) -> float:
    """The cosine floor as runs recorded it before it was a fraction of the peak (`optim.min_lr`),
    multiplied in decimal so that 1e-3 x 0.1 is the 1e-4 their configs wrote (not 1.0000000000000002e-4)."""
    if isinstance(ratio, int):  # `min_lr_ratio=0` as `min_lr=0`: an int stayed an int
        return 0 if ratio == 0 else lr * ratio
    return float(Decimal(repr(float(lr))) * Decimal(repr(float(ratio))))


def as_recorded(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The identity in the form the fingerprints of recorded runs hash: LABEL_KEYS left out, each key
    of ADDED_LATER left out at the value those runs had, and the cosine floor as the absolute `optim.min_lr` they recorded."""
    out = copy.deepcopy(dict(identity))
    for key in LABEL_KEYS:
        node, leaf = _holder(out, key)
        if node is not None:
            node.pop(leaf, None)
    for key, before in ADDED_LATER.items():
        node, leaf = _holder(out, key)
        if node is not None and leaf in node and node[leaf] == before:
            node.pop(leaf)
    optim = out.get("optim")
    if isinstance(optim, dict) and "min_lr_ratio" in optim:
        optim["min_lr"] = recorded_min_lr(optim["lr"], optim.pop("min_lr_ratio"))
    return out


def _holder(tree: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """(the dict that holds a dotted key's leaf, or None; the leaf's name)."""
    *parents, leaf = key.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), leaf


def _digest(identity: Mapping[str, Any]) -> str:
    canonical = json.dumps(as_recorded(identity), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:FINGERPRINT_CHARS]


def flatten(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as {"optim.lr": 0.001, ...}: MLflow params are flat key/value pairs."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg, "")
    return out


def differing_keys(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two identity configs (for error messages)."""
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += differing_keys(va, vb, f"{prefix}{key}.")
        elif va != vb:
            out.append(f"{prefix}{key}")
    return out


def safe_folder_name(name: str, field: str) -> str:
    """A folder name for a user-chosen name: no separators, no `..`, bounded length.

    The MLflow experiment and run keep the name as written; only paths use this. A name that had
    to change gets a short hash of the original, so two different names never share a folder.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{field}: must be a non-empty string, got {name!r}")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "_"
    if safe != name or len(safe) > MAX_FOLDER_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        safe = f"{safe[: MAX_FOLDER_NAME - 9]}-{digest}"
    return safe


@dataclass(frozen=True)
class Identity:
    """What makes two runs the same run: the result-changing config, its fingerprint, its flat form
    (the run's MLflow params) and the folder its checkpoints go to, `<experiment>/<run name>-<fingerprint>`.
    `before_init`: for a config whose `model.init` is not the one runs had before the key existed,
    the fingerprint the same config had then (its old runs are another config's, and a job says so)."""

    fingerprint: str
    config: dict[str, Any]
    params: dict[str, Any]
    folder: str
    before_init: str | None = None

    @classmethod
    def of(cls, cfg: DictConfig) -> Identity:
        config = identity_config(cfg)
        fp = _digest(config)  # fingerprint(cfg), without stripping the config a second time
        experiment = safe_folder_name(cfg.experiment_name, "experiment_name")
        run = safe_folder_name(cfg.run_name, "run_name")
        section, leaf = INIT_KEY.split(".")
        before = None
        if config.get(section, {}).get(leaf, INIT_BEFORE_THE_KEY) != INIT_BEFORE_THE_KEY:
            before = _digest({**config, section: {**config[section], leaf: INIT_BEFORE_THE_KEY}})
        return cls(fp, config, flatten(config), f"{experiment}/{run}-{fp}", before)


@dataclass(frozen=True)
class CheckpointSpec:
    """The `checkpoint` group and `ckpt_path`/`resume`, resolved (the folder follows from the identity)."""

    enabled: bool
    every_n_steps: int
    folder: Path
    resume_from: str | None = None  # "last" or a .ckpt path; None: start fresh
    placed_by: str = "paths.checkpoints_dir"  # the config field that placed the folder

    @property
    def last(self) -> Path:
        return self.folder / LAST

    @property
    def write_folder(self) -> Path | None:
        """Where this run writes checkpoints; None when checkpointing is off."""
        return self.folder if self.enabled else None


def checkpoint_folder(cfg: DictConfig, identity: Identity | None = None) -> Path:
    """Where a run's checkpoints go: `checkpoint.dir`, or the folder its identity names under
    `paths.checkpoints_dir` (a re-run sweep finds it without being told)."""
    if cfg.checkpoint.get("dir"):
        return Path(cfg.checkpoint.dir)
    return Path(cfg.paths.checkpoints_dir) / (identity or Identity.of(cfg)).folder


def check_checkpoint(path: Path, fingerprint: str, identity: dict[str, Any], state: dict[str, Any]) -> None:
    """Refuse a checkpoint trained with another config, before any MLflow run is touched."""
    saved = state.get("identity")
    if saved is None:
        raise ConfigError(f"ckpt_path: {path} carries no run identity (written by another version); start a new run")
    if state.get("fingerprint") != fingerprint:
        keys = differing_keys(saved, identity)
        raise ConfigError(
            f"ckpt_path: {path} was trained with another config; differing keys: {', '.join(keys) or '?'}"
        )
