"""What a training run's MLflow record is made of (`RecordSpec`, resolved once from the config), where
it is recorded and what a sweep's job does with an earlier run of its config (`StoreSpec`), and what a
finished run says (`RunResult`).

Apart from the tracker (src/tracking/tracker.py, which builds on Lightning's MLflow logger) so that a
config is resolved and checked (src/training/run_spec.py) without importing Lightning or MLflow: a
refused config is answered in 3.2 s here, not 4.8 (`python -m src.train optim.lr=-1`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from src.core.terminal import fit
from src.tracking.code import CodeState, code_state
from src.tracking.store_uri import redact_uri
from src.tracking.tags import (
    CLUSTER_TAG,
    DIVERGED,
    EVAL_NOT_FINITE,
    FINISHED,
    MODEL_TAG,
    NORM_FAMILY_TAG,
    NORM_TAG,
    OUTCOME_TAG,
    PRECISION_TAG,
    SEED_TAG,
)
from src.tracking.variants import Axis, label_of, variant_run_name, variant_tags

if TYPE_CHECKING:
    from src.tracking.store import Run

# Keys whose values are places on the machine that ran the job (identity.py leaves them out too).
MACHINE_PATH_KEYS = ("paths", "logger.tracking_uri", "logger.artifact_location", "data.cache_dir", "checkpoint.dir", "ckpt_path")


@dataclass(frozen=True)
class RecordSpec:
    """What a training run's MLflow record is made of, resolved once from the config."""

    experiment_name: str
    run_name: str
    artifact_location: str | None
    tags: dict[str, str]  # norm, family, model, precision, cluster, seed, deterministic
    params: dict[str, Any]  # the experiment's variables (identity config), flat
    config_yaml: str  # the resolved config without this machine's paths, credentials removed
    machine_paths_yaml: str  # where this run read and wrote, on its machine
    world_size: int
    overrides: list[str] = field(default_factory=list)  # the command line's (Hydra's task overrides)
    job_num: int | None = None
    system_metrics_s: float = 0.0  # MLflow's CPU/memory/GPU sampler interval; 0 = off
    # The code that can change its numbers: the project's, and a user norm's file or package beside it
    code: CodeState = field(default_factory=code_state)

    @classmethod
    def from_config(
        cls,
        cfg: DictConfig,
        params: dict[str, Any],
        axes: Sequence[Axis] = (),
        overrides: list[str] | None = None,
        job_num: int | None = None,
    ) -> RecordSpec:
        """`params`: the run's identity config, flat (src.tracking.identity.Identity); `axes`: what its
        sweep varied (none: the norm alone), which give the run its variant's tags and name."""
        portable, machine = split_machine_paths(cfg)
        logger = machine.get("logger") or {}
        if logger.get("tracking_uri"):
            logger["tracking_uri"] = redact_uri(str(logger["tracking_uri"]))
        norm, seed = str(cfg.norm.norm_type), str(cfg.seed)
        label, parts = label_of(params, axes, norm)
        return cls(
            experiment_name=str(cfg.experiment_name),
            run_name=variant_run_name(str(cfg.run_name), params, axes, norm, seed),
            artifact_location=cfg.logger.artifact_location,
            tags={
                NORM_TAG: norm,
                NORM_FAMILY_TAG: str(cfg.norm.family),  # from conf/norm/<key>.yaml: the report groups by it
                MODEL_TAG: str(cfg.model.name),
                PRECISION_TAG: str(cfg.precision.name),
                CLUSTER_TAG: str(cfg.cluster.name),
                SEED_TAG: seed,
                "deterministic": str(bool(cfg.get("deterministic", False))).lower(),
                **variant_tags(label, parts, axes),
            },
            # Machine-local paths and the tracking location are not params: the experiment's variables only.
            params=params,
            config_yaml=config_yaml(portable),
            machine_paths_yaml=config_yaml(machine),
            world_size=int(cfg.cluster.devices) * int(cfg.cluster.num_nodes),
            overrides=list(overrides or []),
            job_num=job_num,
            system_metrics_s=float(cfg.logger.get("system_metrics_s") or 0),
        )


@dataclass
class RunResult:
    name: str  # the run's name: its variant and seed (`torch_rmsnorm · post-s1`), as in the MLflow UI
    outcome: str  # finished | diverged | eval not finite (| running: another process is training it)
    train_time_s: float
    tokens_per_sec: float
    first_train_loss: float | None
    final_train_loss: float | None
    test_loss: float | None
    run_id: str | None
    diverged_at_step: int | None = None
    val_not_finite_at_step: int | None = None  # the first validation whose loss was NaN or infinite

    def status_word(self) -> str:
        """The job line's word for its outcome: `ok`, `DIVERGED at step 5`, `VALIDATION LOSS NOT FINITE at step 2`."""
        if self.outcome == DIVERGED:
            return f"DIVERGED at step {self.diverged_at_step}"
        if self.outcome != EVAL_NOT_FINITE:
            return "ok"
        if self.test_loss is not None and not math.isfinite(self.test_loss):
            return "TEST LOSS NOT FINITE"
        if self.val_not_finite_at_step is not None:
            return f"VALIDATION LOSS NOT FINITE at step {self.val_not_finite_at_step}"
        return "EVAL LOSS NOT FINITE"  # a skipped job's record: its NaN was not kept

    def summary(self) -> str:
        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.4f}"

        status = self.status_word()
        result = (
            f"[normsweep] {self.name} {status} | train {self.train_time_s:.1f} s | {self.tokens_per_sec:,.0f} tok/s"
            f" | train loss {fmt(self.first_train_loss)} -> {fmt(self.final_train_loss)} | test loss {fmt(self.test_loss)}"
        )
        # The run's id on a line of its own: the result line then fits a terminal (src.core.terminal).
        return "\n".join([*fit([result]), f"  | mlflow run {self.run_id or '-'}"])

    @classmethod
    def from_run(cls, run: Run) -> RunResult:
        """The result an existing MLflow run recorded (a skipped job returns it)."""
        m, tags = run.data.metrics, run.data.tags

        def get(key: str) -> float | None:
            value = m.get(key)
            return None if value is None or math.isnan(value) else float(value)

        diverged = get("diverged_at_step")
        return cls(
            name=run.info.run_name or tags.get(NORM_TAG, "?"),
            outcome=tags.get(OUTCOME_TAG, FINISHED),
            train_time_s=get("train_time_s") or 0.0,
            tokens_per_sec=get("avg_tokens_per_sec") or 0.0,
            first_train_loss=None,
            final_train_loss=get("final_train_loss"),
            test_loss=get("test_loss"),
            run_id=run.info.run_id,
            diverged_at_step=int(diverged) if diverged is not None else None,
        )


def split_machine_paths(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the config without this machine's paths, those paths), resolved, as plain containers: the first
    is what another machine can reuse and compare; the second says where this run read and wrote.
    Plain containers, not configs again: a job spent ~7 ms of CPU making the resolved config a config
    once more, to pop a few keys from it and turn it back into containers for YAML."""
    portable = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(portable, dict)
    machine: dict[str, Any] = {}
    for key in MACHINE_PATH_KEYS:
        *parents, leaf = key.split(".")
        node: Any = portable
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or node.get(leaf) is None:
            continue  # absent or null: left as it is, in the portable config
        into = machine
        for part in parents:
            into = into.setdefault(part, {})
        into[leaf] = node.pop(leaf)
    return portable, machine


def config_yaml(container: dict[str, Any]) -> str:
    """A resolved config's YAML, as `OmegaConf.to_yaml` writes it (its dumper, its options), written
    from the container directly: OmegaConf has no public call for that, so its dumper is private API;
    where a release moves it, the config is made again and written by the public call (the same text,
    ~6 ms a job more)."""
    import yaml

    try:
        from omegaconf._utils import get_omega_conf_dumper
    except ImportError:
        return _yaml_through_a_config(container)
    return yaml.dump(container, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=get_omega_conf_dumper())


def _yaml_through_a_config(container: dict[str, Any]) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(container))


@dataclass(frozen=True)
class StoreSpec:
    """Where the run is recorded and what a multirun job does with an earlier run of its identity."""

    enabled: bool
    tracking_uri: str
    artifact_location: str | None
    experiment_name: str
    on_existing: str  # resume | rerun | fail (checked by src.training.run_spec.validate)
    on_code_change: str  # fail | rerun | keep: a run to reuse was made by other code (src.tracking.code)
    stale_after_s: float
    heartbeat_s: float

    @classmethod
    def of(cls, cfg: DictConfig) -> StoreSpec:
        return cls(
            enabled=bool(cfg.logger.enabled),
            tracking_uri=cfg.logger.tracking_uri,
            artifact_location=cfg.logger.get("artifact_location"),
            experiment_name=cfg.experiment_name,
            on_existing=cfg.sweep.on_existing,
            on_code_change=cfg.sweep.on_code_change,
            stale_after_s=float(cfg.sweep.stale_after_s),
            heartbeat_s=float(cfg.sweep.heartbeat_s),
        )
