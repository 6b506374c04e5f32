"""The verdict in MLflow's own columns, on the tiny sweep's real runs: each job's run carries its word
against the report's reference and its interval (and its speed verdict) as tags and metrics that MLflow's search sorts and filters on;
and the report, made again from MLflow, prints only normsweep's lines."""

from __future__ import annotations

import math

import pytest
from helpers import EXPERIMENT, TinySweep
from mlflow.tracking import MlflowClient

from src.report.__main__ import main as report_main
from src.report.analysis import analyze
from src.report.render.sections import table_rows
from src.report.words.columns import LOSS_ORDER, REFERENCE_WORD, SPEED_ORDER, job_columns
from src.stats.verdicts import PairWord
from src.tracking.store import QUIET_MLFLOW_ENV
from src.tracking.summary import (
    JOB_LOSS_BOUNDS,
    JOB_LOSS_METRIC,
    LOSS_SORT_METRIC,
    LOSS_VERDICT_TAG,
    SPEED_SORT_METRIC,
    SPEED_VERDICT_TAG,
)


def _jobs(client: MlflowClient, variant: str) -> list:
    exp = client.get_experiment_by_name(EXPERIMENT).experiment_id
    return client.search_runs([exp], f"tags.variant = '{variant}'")


@pytest.mark.slow
def test_each_job_run_carries_its_verdict_against_the_reports_reference(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    """One reference per column, the report's (torch_layernorm, its table's `test loss vs` column's), on every
    job's run; and each word as a metric MLflow's runs table sorts (it sorts no tag)."""
    analysis = analyze(EXPERIMENT, tiny_sweep.uri)
    (pair,) = [r for r in analysis.reference_comparisons if (r.a, r.b) == ("torch_layernorm", "hand_layernorm")]
    assert f"test loss vs {pair.a}" in table_rows(analysis)[0]  # the reference the report's table names
    measured = _jobs(tiny_client, "hand_layernorm")
    assert len(measured) == 2
    for run in measured:
        tags, metrics = run.data.tags, run.data.metrics
        # The word first (LIKE filters it), then the reference and the interval it was read from.
        assert tags[LOSS_VERDICT_TAG].startswith(f"{pair.verdict} vs torch_layernorm: Δ "), tags[LOSS_VERDICT_TAG]
        assert pair.verdict in set(PairWord) and "interval" in tags[LOSS_VERDICT_TAG]
        assert metrics[JOB_LOSS_METRIC] == pytest.approx(pair.primary.diff, abs=1e-4)  # at the printed precision
        assert metrics[LOSS_SORT_METRIC] == LOSS_ORDER.index(pair.verdict)
        if pair.decision is not None and pair.decision.spread:
            assert metrics[f"{JOB_LOSS_BOUNDS}_low"] <= metrics[JOB_LOSS_METRIC] <= metrics[f"{JOB_LOSS_BOUNDS}_high"]
        (speed,) = [v for v in analysis.reference_speed if v.b == "hand_layernorm"]
        assert tags[SPEED_VERDICT_TAG].startswith(f"{speed.verdict} vs torch_layernorm: step time ")
        assert metrics[SPEED_SORT_METRIC] == SPEED_ORDER.index(speed.verdict)
    # The reference's runs say so, first in a sort; a variant nothing judged (no_norm: diverged) carries nothing.
    for run in _jobs(tiny_client, "torch_layernorm"):
        assert run.data.tags[LOSS_VERDICT_TAG].startswith(REFERENCE_WORD) and run.data.tags[SPEED_VERDICT_TAG].startswith(REFERENCE_WORD)
        assert run.data.metrics[LOSS_SORT_METRIC] == run.data.metrics[SPEED_SORT_METRIC] == run.data.metrics[JOB_LOSS_METRIC] == 0
    assert not any(LOSS_VERDICT_TAG in r.data.tags for r in _jobs(tiny_client, "no_norm"))
    # MLflow's own search filters on the tag and sorts on the metric, as the runs table does.
    exp = tiny_client.get_experiment_by_name(EXPERIMENT).experiment_id
    found = tiny_client.search_runs([exp], f"tags.{LOSS_VERDICT_TAG} LIKE '{pair.verdict}%'", order_by=[f"metrics.{JOB_LOSS_METRIC} DESC"])
    assert {r.info.run_id for r in found} == {r.info.run_id for r in measured}
    ordered = tiny_client.search_runs([exp], f"metrics.`{LOSS_SORT_METRIC}` >= 0", order_by=[f"metrics.`{LOSS_SORT_METRIC}` ASC"])
    assert [r.data.tags["variant"] for r in ordered] == ["torch_layernorm"] * 2 + ["hand_layernorm"] * 2
    assert set(job_columns(analysis)) == {"hand_layernorm", "torch_layernorm"}


@pytest.mark.slow
def test_the_report_made_again_prints_only_our_lines(
    tiny_sweep: TinySweep, tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m src.report` on a finished sweep appends to its tables (MLflow downloads each first):
    MLflow's "Downloading artifacts" bars stayed on the console. The verdict columns are written once."""
    for key in QUIET_MLFLOW_ENV:
        monkeypatch.delenv(key, raising=False)
    before = {r.info.run_id: r.data.metrics for r in _jobs(MlflowClient(tiny_sweep.uri), "torch_layernorm")}
    args = ["--experiment-name", EXPERIMENT, "--tracking-uri", tiny_sweep.uri, "--out", str(tmp_path)]
    assert report_main(args) == 0
    out, err = capsys.readouterr()
    assert "Downloading artifacts" not in out + err and "View run" not in out + err, err[-2000:]
    assert "normsweep report:" in out
    lines = (out + err).splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    client = MlflowClient(tiny_sweep.uri)
    for run_id, metrics in before.items():  # unchanged values are not logged again (no second row)
        history = client.get_metric_history(run_id, JOB_LOSS_METRIC)
        assert len(history) == 1 and math.isclose(history[0].value, metrics[JOB_LOSS_METRIC])
