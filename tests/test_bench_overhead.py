"""`python -m src.bench overhead`: the tool's own cost per job against a bare Hydra + Lightning +
MLflow sweep (src/bench/overhead.py), the floor's sweep (src/bench/floor.py) and the clock both
carry (src/bench/clock.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, cli_env

from src.bench import clock, overhead


def test_the_clock_notes_each_jobs_start_and_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    timer = clock.Clock()
    timer.on_job_start(None)  # no file named: nothing written, nothing raised
    path = tmp_path / "clock.jsonl"
    monkeypatch.setenv(clock.CLOCK_ENV, str(path))
    for _ in range(2):
        timer.on_job_start(None)
        timer.on_job_end(None, None)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["event"] for e in events] == ["job_start", "job_end"] * 2
    times = [e["t"] for e in events]
    assert times == sorted(times)


def test_the_ratio_is_the_geometric_mean_of_each_rounds() -> None:
    one = overhead.ratio([2.0], [1.0])
    assert one["ratio"] == pytest.approx(2.0) and math.isnan(one["low"])  # one round: no interval
    two = overhead.ratio([2.0, 8.0], [1.0, 2.0])  # rounds of 2x and 4x
    assert two["ratio"] == pytest.approx(math.sqrt(8.0))
    assert two["low"] < two["ratio"] < two["high"]
    assert overhead.ratio_text(one) == "2.00×"


def test_both_sweeps_run_the_same_tiny_model() -> None:
    floor = overhead.floor_command(3, Path("/x"))
    tool = overhead.tool_command(3, Path("/x"), Path("/c"))
    for key, (ours, value) in overhead.TINY.items():
        assert f"{key}={value}" in floor and f"{ours}={value}" in tool
    assert "seed=range(0,3)" in floor and "seed=range(0,3)" in tool
    assert overhead.CLOCK in floor and overhead.CLOCK in tool


@pytest.mark.slow  # three real sweeps: the warm-up, then normsweep and the floor at 2 jobs
def test_the_overhead_bench_measures_both_sweeps(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "src.bench", "overhead", "--jobs", "2", "--rounds", "1", "--out", str(tmp_path)],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "overhead.json").read_text())
    assert [row["jobs"] for row in report["rows"]] == [2]
    for row in report["rows"]:
        for kind in ("normsweep", "floor"):
            assert row[f"training_s {kind}"] > 0 and row[f"before_first_job_s {kind}"] > 0
        assert row["config_loads_per_job"] is not None and row["config_loads_per_job"] > 0
        assert math.isfinite(row["all_but_training_s ratio"]["ratio"])
    # each sweep's clock heard each of its jobs
    assert all(len(report["raw"]["2"][kind]) == 1 for kind in ("normsweep", "floor"))
    markdown = (tmp_path / "overhead.md").read_text()
    assert markdown.startswith("# The tool's own cost against the floor (1 interleaved rounds") and "| 2 |" in markdown
    print(markdown)
