"""The speed a sweep reports comes from its variants' steps interleaved after the jobs, not from the
jobs' own tokens/s (one after another on a shared machine, that measures the machine's load)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import TinySweep

from src.config import validate
from src.launch.speed_check import bench_command
from src.paths import ConfigError, compose

JOBS = [
    {"overrides": [f"norm={n}", f"seed={s}", "model.n_layers=1", "experiment_name=x", "++hydra.x=1"]}
    for n in ("hand_layernorm", "torch_layernorm")
    for s in (0, 1)
]


def test_bench_command_times_the_swept_variants_on_the_sweeps_config(tmp_path: Path) -> None:
    command = bench_command(JOBS, 20, tmp_path)
    assert command == [
        sys.executable, "-m", "src.bench", "variants", "--variants", "hand_layernorm,torch_layernorm",
        "--rounds", "20", "--out", str(tmp_path), "model.n_layers=1", "experiment_name=x",
    ]  # fmt: skip
    assert bench_command(JOBS[:1], 20, tmp_path) is None  # one variant: nothing to compare


def test_speed_rounds_is_checked_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match=r"report.speed_rounds: must be 0 .* or an integer >= 2"):
        validate(compose(["report.speed_rounds=1"]))
    assert compose(["experiment=norm_sweep"]).report.speed_rounds > 0  # `make sweep` measures speed


@pytest.mark.slow
def test_the_sweep_reports_interleaved_speed(tiny_sweep: TinySweep) -> None:
    first = tiny_sweep.outputs[0]  # the multirun with report.speed_rounds=2
    assert "[normsweep] speed: 2 interleaved rounds of hand_layernorm,torch_layernorm" in first
    assert "warning: speed check" not in first
    assert "Speed, measured by interleaving the variants' training steps" in first
    assert "interleaved speed vs torch_layernorm" in first  # the table's speed column is that measurement
