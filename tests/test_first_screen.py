"""What a user sees first: a report that fits a terminal, the speed check's estimate on every job run
(a column, one chart of all variants), MLflow's start view, and a claims picture that cannot be
misread. The slow tests read one real five-norm tiny sweep with the speed check on."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import TINY_MODEL, run_cli
from mlflow.tracking import MlflowClient

from src.bench.variants import BELOW_NOISE, share_cell
from src.core.tables import text_table
from src.core.terminal import WIDTH, fit, wrap
from src.tracking.summary import (
    JOB_SPEED_METRIC,
    JOB_SPEED_SECTION,
    JOB_SPEED_TAG,
    LOSS_VERDICT_TAG,
    SPEED_VERDICT_TAG,
    job_speed_metrics,
)
from src.tracking.tags import BENCH_TAG, SPEED_CHECK_RUN_NAME, SWEEP_TAG
from src.tracking.ui_app import ASSISTANT_OPENED_KEY, RUN_CHARTS_KEY, page_script
from src.tracking.ui_view import (
    HIDE_LISTED,
    LOG_AXIS,
    MODEL_METRICS,
    ONE_AFTER_ANOTHER,
    ONE_AFTER_ANOTHER_METRICS,
    START_VIEW_TAG,
    chart_layout,
    column,
    start_view_state,
)

FIVE = "hand_layernorm,torch_layernorm,hand_rmsnorm,torch_rmsnorm,no_norm"
EXPERIMENT = "five_norms"


# --- fitting a terminal ------------------------------------------------------------------------


def test_a_wide_table_splits_its_columns_into_blocks_led_by_the_first() -> None:
    headers = ["variant", "test loss", "step time vs its pair (speed check: the verdict's estimate)", "training time (s; jobs one after another)", "tokens/s (jobs one after another)", "family"]
    long = "vs hand_rmsnorm -0.1% [-0.1%, -0.1%]; vs torch_layernorm +0.4% [+0.4%, +0.4%]; vs no_norm +0.6% [+0.6%, +0.6%]"
    rows = [["torch_rmsnorm", "10.7896", long, "0.3", "1,927", "rmsnorm"], ["no_norm", "10.8240", "—", "0.3", "1,970", "none"]]
    whole = text_table(headers, rows)
    assert max(map(len, whole.splitlines())) > WIDTH  # what it was: one line per row, 250 characters
    fitted = text_table(headers, rows, width=WIDTH)
    lines = fitted.splitlines()
    assert max(map(len, lines)) <= WIDTH
    blocks = fitted.split("\n\n")
    assert len(blocks) >= 2 and all(b.startswith("variant ") for b in blocks)  # each block names its rows
    words = " ".join(fitted.split())
    assert all(" ".join(cell.split()) in words for row in rows for cell in row)  # nothing dropped, only wrapped
    assert headers[2] in fitted  # a header that fits a column stays whole


def test_a_sentence_wraps_under_its_first_line_and_keeps_a_short_command_whole() -> None:
    line = "  Is it real? One seed per variant: no gap is tested; `make sweep-seeds` (three seeds each) " + "or more " * 20
    lines = wrap(line)
    assert len(lines) > 1 and all(len(x) <= WIDTH for x in lines)
    assert lines[0].startswith("  Is") and all(x.startswith("    ") for x in lines[1:])
    assert any("`make sweep-seeds`" in x for x in lines)
    assert fit(["a\nb", "short"]) == ["a", "b", "short"]


def test_a_share_outside_zero_to_one_is_said_as_noise() -> None:
    assert share_cell(0.012) == "1.2%" and share_cell(1.0) == "100.0%"
    assert share_cell(-0.166) == BELOW_NOISE and share_cell(1.3) == BELOW_NOISE
    assert share_cell(None) == share_cell(math.nan) == "—"


# --- the MLflow views --------------------------------------------------------------------------


def test_the_views_lead_with_the_results_and_chart_the_speed_estimate() -> None:
    layout = chart_layout()
    sections = {s["uuid"]: s["name"] for s in layout["compareRunSections"]}
    charts = {c["metricKey"]: c for c in layout["compareRunCharts"]}
    # Test loss and the speed estimate side by side as bars (one per variant when grouped), the losses on a log axis.
    assert sections[charts[JOB_SPEED_METRIC]["metricSectionId"]] == MODEL_METRICS and charts[JOB_SPEED_METRIC]["type"] == "BAR"
    assert all(charts[key]["scaleType"] == "log" for key in LOG_AXIS)
    # The jobs' own times are charted, but apart from the results, in their own section.
    assert {sections[charts[m]["metricSectionId"]] for m in ONE_AFTER_ANOTHER_METRICS} == {ONE_AFTER_ANOTHER}
    view = start_view_state(["sweep"], ["sweep", "check"])
    assert column("tags", "outcome") in view["selectedColumns"] and len(view["selectedColumns"]) <= 7
    # Each number beside the verdict read from it, the words a user sorts and filters on.
    assert view["selectedColumns"][:4] == [column("metrics", "test_loss"), column("tags", LOSS_VERDICT_TAG),
                                           column("metrics", JOB_SPEED_METRIC), column("tags", SPEED_VERDICT_TAG)]  # fmt: skip
    assert all(c["runsCountToCompare"] >= 100 for c in layout["compareRunCharts"])  # MLflow's 10 left 5 of 15 jobs out
    # Runs without curves (the sweep run, its speed check) are out of the charts and their legends.
    assert view["runsHiddenMode"] == HIDE_LISTED and view["runsHidden"] == ["sweep", "check"]
    assert view["runsVisibilityMap"] == {"sweep": False, "check": False}
    assert START_VIEW_TAG.startswith("mlflow.")  # the home page leaves MLflow's own tags out of its Tags column


def test_the_page_keeps_the_assistant_closed_and_opens_a_job_on_its_losses() -> None:
    script = page_script()
    assert json.dumps(ASSISTANT_OPENED_KEY) in script and json.dumps(RUN_CHARTS_KEY) in script
    assert "compareRunCharts" in script  # the start view's chart order, reused on each run's page


def test_a_jobs_speed_metrics_are_percent_with_their_interval() -> None:
    got = job_speed_metrics(0.004123, 0.0031, 0.0052)
    bounds = f"{JOB_SPEED_SECTION}/{JOB_SPEED_METRIC}"
    assert got == {JOB_SPEED_METRIC: 0.41, f"{bounds}_low": 0.31, f"{bounds}_high": 0.52}
    assert len(JOB_SPEED_METRIC) <= 16  # short: a runs-table column (~100 px) shows it, and the result columns fit 1440 px


# --- a real five-norm sweep with the speed check ----------------------------------------------


@dataclass
class FiveNorms:
    uri: str
    output: str
    reports: Path


@pytest.fixture(scope="module")
def five_norms(tmp_path_factory: pytest.TempPathFactory, token_cache_dir: Path) -> FiveNorms:
    root = tmp_path_factory.mktemp("five_norms")
    proc = run_cli(
        "src.train", "-m", *TINY_MODEL, "optim.max_steps=5", "val_every_n_steps=5", f"experiment_name={EXPERIMENT}",
        f"paths.cache_dir={token_cache_dir}", f"paths.mlflow_db={root / 'mlflow.db'}",
        f"paths.mlflow_artifacts={root / 'mlartifacts'}", f"hydra.sweep.dir={root / 'multirun'}",
        f"paths.reports_dir={root / 'reports'}", f"norm={FIVE}", "seed=0", "report.speed_rounds=2", "report.speed_kernel_s=1",
        "report.share_rounds=0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return FiveNorms(f"sqlite:///{root / 'mlflow.db'}", proc.stdout + proc.stderr, root / "reports" / EXPERIMENT)


@pytest.mark.slow
def test_the_sweep_prints_nothing_wider_than_a_terminal(five_norms: FiveNorms) -> None:
    out = five_norms.output
    assert "[normsweep] speed check took" in out and "normsweep report:" in out  # the check ran, the report printed
    wide = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not wide, f"{len(wide)} lines over {WIDTH} characters, the first: {wide[0]!r}"
    assert "kernel finding: torch_rmsnorm" in out and "warning: torch_rmsnorm" not in out  # a finding, not a fault
    assert "Holm-adjusted over" not in out  # one seed each: no test ran, so no tests' heading
    assert "5 jobs (5 finished)" in MlflowClient(five_norms.uri).search_runs(
        [MlflowClient(five_norms.uri).get_experiment_by_name(EXPERIMENT).experiment_id], f"tags.`{SWEEP_TAG}` = 'true'"
    )[0].data.tags["sweep.end_reason"]  # the training jobs: the speed check is none


@pytest.mark.slow
def test_each_job_run_carries_its_variants_speed_estimate(five_norms: FiveNorms) -> None:
    client = MlflowClient(five_norms.uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    jobs = [r for r in runs if "norm" in r.data.tags]
    assert len(jobs) == 5
    bounds = f"{JOB_SPEED_SECTION}/{JOB_SPEED_METRIC}"
    check = json.loads((five_norms.reports / "bench" / "variants.json").read_text())
    for run in jobs:
        m = run.data.metrics
        assert m[f"{bounds}_low"] <= m[JOB_SPEED_METRIC] <= m[f"{bounds}_high"], run.info.run_name
        assert JOB_SPEED_TAG in run.data.tags
    (reference,) = [r for r in jobs if r.data.tags["norm"] == check["kernel"]["reference"]]
    assert reference.data.metrics[JOB_SPEED_METRIC] == 0 and reference.data.tags[JOB_SPEED_TAG].startswith("ref")
    # The check's run lasts as long as the check did (it was recorded at its end, 46 ms long).
    (speed,) = [r for r in runs if r.info.run_name == SPEED_CHECK_RUN_NAME and BENCH_TAG in r.data.tags]
    assert (speed.info.end_time - speed.info.start_time) / 1000 >= sum(check["time_s"].values())
    # The start view knows the runs to keep out of the charts.
    view = json.loads(experiment.tags[START_VIEW_TAG])
    assert speed.info.run_id in view["runsHidden"]
    # variants.md: every share a share.
    table = (five_norms.reports / "bench" / "variants.md").read_text()
    shares = [float(x) for x in re.findall(r"\| (-?[\d.]+)% \|$", table, re.M)]
    assert shares and all(0 <= s <= 100 for s in shares)


@pytest.mark.slow
def test_claims_outside_a_cpu_sweeps_domain_are_drawn_not_testable(five_norms: FiveNorms) -> None:
    from src.report.analysis import analyze
    from src.report.figures.claims import CHECK_SPEED_TITLE, LABELS, NOT_TESTABLE, plot_claims
    from src.report.figures.forest import OWN

    section = analyze(EXPERIMENT, five_norms.uri).study
    fig = plot_claims(section)
    assert fig is not None
    speed_ax = fig.axes[0]
    assert speed_ax.get_title() == CHECK_SPEED_TITLE.format(whose="the study's")  # the quantity drawn: step time from the norms' kernels
    for ax in fig.axes:
        rows = len(ax.get_yticks())
        said = [t for t in ax.texts if t.get_text().startswith(NOT_TESTABLE)]
        assert len(said) == rows and all("CPU run" in t.get_text() or "parameters" in t.get_text() for t in said)
        # No dot of this sweep's against the study's band: only the study's diamonds are drawn.
        assert not [line for line in ax.lines if line.get_marker() == "o"]
    # This sweep's own readings at its own setting, set apart (grey hollow squares), the legend naming them no test;
    # the title promises no margin it does not draw.
    own = [line for line in speed_ax.lines if line.get_marker() == OWN["marker"]]
    assert len(own) == len(speed_ax.get_yticks())  # the speed check timed every pair the speed claims name
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert LABELS["own"] in labels and LABELS["estimate"] not in labels
    assert "dotted" not in fig.get_suptitle() and "grey square" in fig.get_suptitle()
