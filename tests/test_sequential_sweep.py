"""The sequential sweeper: its config, its bad input, the planner, and a real sweep that settles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli
from mlflow.tracking import MlflowClient

from src.launch.sequential import check_settings
from src.paths import ConfigError, compose
from src.report.comparisons import Margins
from src.report.plan import forecast, plan_text
from src.tracking.looks import LOOKS_ARTIFACT, STOP_TAG, read_looks
from src.tracking.store import Store
from src.tracking.sweep import SWEEP_TAG

TARGET = "hydra_plugins.normsweep_sweepers.sequential.SequentialSweeper"


def test_the_sweeper_composes_with_the_basic_and_the_joblib_launchers() -> None:
    for extra, launcher in (([], "BasicLauncher"), (["cluster=cpu_pool"], "JoblibLauncher")):
        cfg = compose(["experiment=norm_sweep_settle", *extra], with_hydra=True)
        assert cfg.hydra.sweeper._target_ == TARGET
        assert cfg.hydra.launcher._target_.endswith(launcher)
        assert cfg.hydra.sweeper.params.norm == cfg.norm_sets.study


def test_hydra_finds_the_sweeper_class() -> None:
    # Hydra instantiates a sweeper only from a plugin it scanned under hydra_plugins.
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    cls = Plugins.instance().class_name_to_class[TARGET]
    assert issubclass(cls, Sweeper)


@pytest.mark.parametrize(
    "settings,field",
    [
        ((1, 2, 6, 0.05, ["test_loss"]), "first_seeds"),
        ((3, 0, 6, 0.05, ["test_loss"]), "seeds_per_round"),
        ((3, 2, 2, 0.05, ["test_loss"]), "max_seeds"),
        ((3, 2, 6, 1.5, ["test_loss"]), "alpha"),
        ((3, 2, 6, 0.05, ["val_loss"]), "metrics"),
    ],
)
def test_bad_settings_name_the_field(settings: tuple, field: str) -> None:
    with pytest.raises(ConfigError, match=f"hydra.sweeper.{field}"):
        check_settings(*settings)


@pytest.mark.slow  # a CLI in a subprocess: a fresh interpreter imports torch, Lightning, Hydra and MLflow
def test_bad_setting_on_the_command_line_is_one_line(tiny_overrides: list[str], store: dict[str, str]) -> None:
    args = ["-m", "norm=hand_layernorm,torch_layernorm", "hydra/sweeper=sequential", "hydra.sweeper.max_seeds=2"]
    proc = run_cli("src.train", *args, *tiny_overrides)
    assert proc.returncode != 0 and "HYDRA_FULL_ERROR" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "config error: hydra.sweeper.max_seeds: must be an integer >= 3, got 2"
    assert not any(MlflowClient(store["uri"]).search_runs([e.experiment_id for e in MlflowClient(store["uri"]).search_experiments()]))


def _pilot(pairs: dict[str, tuple[float, float]], seeds: int, seconds: float = 36.0) -> pd.DataFrame:
    """Runs of hand_layernorm (the reference) and the given variants: (mean difference, spread)."""
    rng = np.random.default_rng(11)
    base = 5.0 + 0.05 * rng.standard_normal(seeds)
    rows = [("hand_layernorm", "layernorm", s, base[s]) for s in range(seeds)]
    for variant, (delta, sd) in pairs.items():
        family = "rmsnorm" if "rms" in variant else "layernorm"
        rows += [(variant, family, s, base[s] + delta + sd * rng.standard_normal()) for s in range(seeds)]
    frame = pd.DataFrame(rows, columns=["variant", "family", "seed", "test_loss"])
    return frame.assign(outcome="finished", train_time_s=seconds, devices=2.0, lr=1e-3)


def test_the_plan_forecasts_seeds_and_device_hours_from_a_pilot() -> None:
    runs = _pilot({"torch_layernorm": (0.0, 1e-5), "hand_rmsnorm": (0.008, 0.02)}, seeds=4)
    out = {
        f.pair: f
        for f in forecast(runs, Margins(), first_seeds=3, seeds_per_round=2, alpha=0.05, sweeps=2000)
    }
    easy, hard = out["torch_layernorm vs hand_layernorm"], out["hand_rmsnorm vs hand_layernorm"]
    assert easy.median_seeds == 3 and easy.equivalent > 0.99  # decided at the first look
    assert hard.median_seeds > 20 and hard.p90_seeds >= hard.median_seeds
    # Two variants x 36 s x 2 devices per seed = 0.04 device-hours per seed.
    assert math.isclose(easy.device_hours_median, 3 * 0.04)
    text = plan_text(
        "pilot", list(out.values()), Margins(), {"first_seeds": 3, "seeds_per_round": 2, "alpha": 0.05}
    )
    assert "hydra/sweeper=sequential" in text and "norm=hand_layernorm,hand_rmsnorm,torch_layernorm" in text


@pytest.mark.slow
def test_a_sequential_sweep_settles_at_the_first_look_and_a_rerun_adds_nothing(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    args = ["-m", *tiny_overrides, "experiment=norm_sweep_settle", "norm=hand_layernorm,torch_layernorm",
            "hydra.sweeper.first_seeds=3", "hydra.sweeper.max_seeds=6"]  # fmt: skip
    first = run_cli("src.train", *args)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-3000:]
    assert "torch_layernorm vs hand_layernorm (test_loss): equivalent within ±0.01 after 3 seeds" in out
    assert "stopped: every comparison decided after 3 seeds" in out

    client = MlflowClient(store["uri"])
    experiment = client.get_experiment_by_name("norm_sweep_settle").experiment_id

    def training_runs() -> list[str]:
        runs = client.search_runs([experiment], max_results=100)
        return sorted(r.info.run_name for r in runs if r.data.tags.get(SWEEP_TAG) != "true")

    expected = [f"{v}-s{s}" for v in ("hand_layernorm", "torch_layernorm") for s in range(3)]
    assert training_runs() == expected
    (parent,) = [r for r in client.search_runs([experiment]) if r.data.tags.get(SWEEP_TAG) == "true"]
    assert parent.data.tags[STOP_TAG] == "every comparison decided after 3 seeds"
    (look,) = read_looks(Store.connect(store["uri"]), parent.info.run_id)
    assert look["seeds"] == 3 and look["seeds_per_variant"] == {"hand_layernorm": 3, "torch_layernorm": 3}
    (row,) = look["comparisons"]
    assert (
        row["decision"] == "equivalent"
        and row["decided_at_seeds"] == 3
        and row["low"] <= row["diff"] <= row["high"]
    )

    plan = run_cli("src.report", "--plan", "--experiment", "norm_sweep_settle", *tiny_overrides)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "torch_layernorm vs hand_layernorm" in plan.stdout and "hydra/sweeper=sequential" in plan.stdout

    again = run_cli("src.train", *args)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert "launching" not in out and "already has a result in MLflow" in out
    assert training_runs() == expected  # nothing trained twice
    files = [f.path for f in client.list_artifacts(parent.info.run_id, "sweep")]
    assert LOOKS_ARTIFACT in files
    assert json.loads(
        Path(client.download_artifacts(parent.info.run_id, LOOKS_ARTIFACT, str(tmp_path))).read_text()
    )


def test_the_job_list_is_the_first_round_and_seed_lists_are_refused() -> None:
    from omegaconf import OmegaConf

    from src.launch.sequential import first_round_overrides

    cfg = compose(["experiment=norm_sweep_settle"], with_hydra=True)
    assert first_round_overrides(cfg) == ["seed=0,1,2"]
    assert (
        first_round_overrides(compose(["experiment=norm_sweep_seeds"], with_hydra=True)) == []
    )  # basic sweeper
    OmegaConf.update(cfg, "hydra.sweeper.params.seed", "0,1", force_add=True)
    with pytest.raises(ConfigError, match="seed: the sequential sweeper chooses the seeds"):
        first_round_overrides(cfg)
