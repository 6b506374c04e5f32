"""The jobs' own times carry how they were taken wherever they are shown: a table of
any seed count labels its jobs' tokens/s ratio "not a measurement", and says whether the jobs ran one
after another or at once, as their runs' start and end times show (src.report.words.jobs)."""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from src.report.analysis import analyze
from src.report.read.table import JOBS_AT_ONCE, summarize
from src.report.read.timing import most_at_once
from src.report.render.sections import table_rows
from src.report.words.jobs import how_jobs_ran
from src.report.words.table import JOBS_SPEED_COLUMN, SPEED_CAVEAT, csv_frame, display_rows

START = pd.Timestamp("2025-01-01")
NORMS = {"hand_layernorm": "layernorm", "torch_layernorm": "layernorm", "hand_rmsnorm": "rmsnorm"}


def minutes(*spans: tuple[float, float]) -> pd.DataFrame:
    """A runs frame's times: one run per (start, end) in minutes."""
    return pd.DataFrame({"start_time": [START + pd.Timedelta(minutes=a) for a, _ in spans],
                         "end_time": [START + pd.Timedelta(minutes=b) for _, b in spans]})  # fmt: skip


def test_overlap_is_read_from_the_runs_times() -> None:
    assert most_at_once(minutes((0, 9), (10, 19), (20, 29))) == 1
    assert most_at_once(minutes((0, 10), (10, 20))) == 1  # one starts as the other ends: not at once
    assert most_at_once(minutes((0, 30), (1, 31), (2, 9), (40, 50))) == 3
    assert how_jobs_ran(minutes((0, 9), (10, 19))) == "one after another"
    assert how_jobs_ran(minutes((0, 20), (10, 19))) == "at once, up to 2 overlapping in time"
    running = minutes((0, 9), (1, 2)).assign(end_time=[START + pd.Timedelta(minutes=9), pd.NaT])
    assert most_at_once(running) == 1  # a run without an end has no timing of its own to show
    assert how_jobs_ran(pd.DataFrame({"start_time": [START]})) == "separately"  # no end times: nothing claimed


def two_seeds(spans: list[tuple[float, float]]) -> pd.DataFrame:
    rows = [{"variant": v, "family": f, "outcome": "finished", "seed": s, "train_time_s": 10.0, "test_loss": 3.0,
             "tokens_per_sec": 100.0 + 20 * i + s} for i, (v, f) in enumerate(NORMS.items()) for s in range(2)]  # fmt: skip
    return pd.concat([pd.DataFrame(rows), minutes(*spans)], axis=1)


@pytest.mark.parametrize(
    ("overlap", "how"),
    [(False, "one after another"), (True, "at once, up to 6 overlapping in time")],
)
def test_a_two_seed_table_labels_the_jobs_ratio_as_not_a_measurement(overlap: bool, how: str) -> None:
    """A two-seed table's jobs' ratio: its header and table.csv's column say what it is (not a
    measurement), and how the jobs ran."""
    spans = [(0, 100) if overlap else (10 * k, 10 * k + 9) for k in range(6)]
    table = summarize(two_seeds(spans))
    headers, rows = display_rows(table)
    assert f"jobs' tokens/s vs hand-rolled ({how}: not a measurement)" in headers
    assert f"tokens/s (jobs {how})" in headers and f"training time (s; jobs {how})" in headers
    assert "speed vs hand-rolled" not in headers  # no bare ratio left
    csv = csv_frame(table)
    assert set(csv[SPEED_CAVEAT]) == {f"{how}: not a measurement"}  # table.csv, beside the jobs' ratio
    assert "speed_vs_hand" not in csv and "load_driven" in JOBS_SPEED_COLUMN  # named for what drives it
    assert list(csv.columns).index(SPEED_CAVEAT) == list(csv.columns).index(JOBS_SPEED_COLUMN) + 1
    assert set(table[JOBS_AT_ONCE]) == {6 if overlap else 1}


def test_one_seed_says_one_run_each_and_a_speed_check_leaves_the_jobs_columns_labelled() -> None:
    one = summarize(two_seeds([(10 * k, 10 * k + 9) for k in range(6)]).query("seed == 0"))
    headers, _ = display_rows(one)
    assert "jobs' tokens/s vs hand-rolled (one run each, one after another: not a measurement)" in headers
    headers, _ = display_rows(one, pair_cells={"torch_layernorm": "vs hand_layernorm +1.0% [+0.5%, +1.5%]"})
    assert "tokens/s (jobs one after another)" in headers and not any("hand-rolled" in h for h in headers)


def test_runs_logged_at_once_read_as_at_once_through_mlflow(migrated_store: dict[str, str]) -> None:
    """The real path: runs whose MLflow start and end times overlap (a pool, SLURM) head the table's
    jobs' columns "at once", not "one after another"."""
    client = MlflowClient(migrated_store["uri"])
    exp = client.create_experiment("at_once")
    base = int(START.timestamp() * 1000)
    for i, (norm, family) in enumerate(NORMS.items()):
        for seed in range(2):
            tags = {"norm": norm, "norm_family": family, "seed": str(seed), "model": "cpu_small", "outcome": "finished"}
            run = client.create_run(exp, run_name=f"{norm}-s{seed}", tags=tags, start_time=base + 1000 * (2 * i + seed)).info.run_id
            for key, value in {"train_time_s": 60.0, "avg_tokens_per_sec": 100.0 + 20 * i + seed, "test_loss": 3.0 + 0.001 * seed}.items():
                client.log_metric(run, key, value, step=100)
            client.set_terminated(run, "FINISHED", end_time=base + 60_000 + 1000 * (2 * i + seed))
    analysis = analyze("at_once", migrated_store["uri"])
    headers, _ = table_rows(analysis)
    assert "jobs' tokens/s vs hand-rolled (at once, up to 6 overlapping in time: not a measurement)" in headers
    assert set(csv_frame(analysis.table)[SPEED_CAVEAT]) == {"at once, up to 6 overlapping in time: not a measurement"}
