"""A training config resolved once into the typed pieces each stage needs.

`train()` receives a Hydra `DictConfig`; rather than let it travel into every helper, `resolve`
validates it and reads, once, what checkpointing, the run plan and the device checks use. The
model gets its `GPTConfig` and the budget its `Budget` the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from src.config import validate
from src.devices import DeviceSpec
from src.model.gpt import GPTConfig
from src.tracking.identity import fingerprint, flatten, identity_config
from src.tracking.variants import AXES_ENV, axes_from_env, variant_run_name
from src.training.checkpointing import CheckpointSpec, checkpoint_dir


@dataclass(frozen=True)
class Identity:
    """What makes two runs the same run: the result-changing config and its fingerprint."""

    fingerprint: str
    config: dict[str, Any]


@dataclass(frozen=True)
class StoreSpec:
    """Where the run is recorded and what a multirun job does with an earlier run of its identity."""

    enabled: bool
    tracking_uri: str
    artifact_location: str | None
    experiment_name: str
    on_existing: str  # resume | rerun | fail (checked by config.validate)
    on_code_change: str  # fail | rerun | keep: a run to reuse was made by other code (src.tracking.code)
    stale_after_s: float
    heartbeat_s: float


@dataclass(frozen=True)
class RunSpec:
    run_name: str
    seed: int
    model: GPTConfig
    identity: Identity
    checkpoint: CheckpointSpec
    devices: DeviceSpec
    store: StoreSpec
    # The name its MLflow run gets (src.tracking.tracker: the variant apart, `hand_layernorm · pre-s0`),
    # which a job's lines use: `run_name` alone cannot tell the runs of a norm × placement sweep apart.
    shown_name: str = ""


def resolve(cfg: DictConfig) -> RunSpec:
    """Validate `cfg` (ConfigError naming the field) and split it into the stages' pieces."""
    model = validate(cfg)
    ck = cfg.checkpoint
    wanted = cfg.get("ckpt_path")
    fp = fingerprint(cfg)
    return RunSpec(
        run_name=cfg.run_name,
        seed=cfg.seed,
        model=model,
        identity=Identity(fp, identity_config(cfg)),
        checkpoint=CheckpointSpec(
            enabled=bool(ck.enabled),
            every_n_steps=int(ck.every_n_steps),
            folder=checkpoint_dir(cfg, fp),
            resume_from="last" if wanted is None and cfg.get("resume") else wanted,
        ),
        devices=DeviceSpec.of(cfg),
        shown_name=variant_run_name(
            str(cfg.run_name), flatten(identity_config(cfg)), axes_from_env(os.environ.get(AXES_ENV)),
            str(cfg.norm.norm_type), cfg.seed,
        ),
        store=StoreSpec(
            enabled=bool(cfg.logger.enabled),
            tracking_uri=cfg.logger.tracking_uri,
            artifact_location=cfg.logger.get("artifact_location"),
            experiment_name=cfg.experiment_name,
            on_existing=cfg.sweep.on_existing,
            on_code_change=cfg.sweep.on_code_change,
            stale_after_s=float(cfg.sweep.stale_after_s),
            heartbeat_s=float(cfg.sweep.heartbeat_s),
        ),
    )

