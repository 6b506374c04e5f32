"""The MLflow UI of a finished tiny sweep, opened in a real browser (Debian's chromium driven by Playwright).

What a user must see from the links normsweep prints: the experiment on its training runs (not the
GenAI view), every job drawn in the charts, the runs grouped by variant, the results as columns, a
headline metric drawn as a value (bars, not a single-dot line), and on the sweep run's Overview the
verdict and the per-variant aggregates. `.ci/run` installs the browser and Playwright; elsewhere the
test skips without them, unless NORMSWEEP_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import EXPERIMENT, REPO, TinySweep, ui_env
from mlflow.tracking import MlflowClient

from src.core.process_group import stop_group
from src.report.analysis import analyze
from src.report.render.sections import table_rows
from src.report.words.columns import REFERENCE_WORD
from src.report.words.table import CHECK_SPEED_HEADER
from src.stats.verdicts import PairWord
from src.tracking.intervals import interval_key
from src.tracking.summary import (
    JOB_LOSS_METRIC,
    JOB_SPEED_METRIC,
    LOSS_SORT_METRIC,
    LOSS_VERDICT_TAG,
    SECTION,
    SPEED_VERDICT_TAG,
    aggregate_metrics,
    sweep_params,
)
from src.tracking.sweep import SWEEP_TAG
from src.tracking.tags import SPEED_CHECK_RUN_NAME
from src.tracking.ui_view import column, ui_link
from src.tracking.variants import REFERENCE_VARIANT as REFERENCE

UP_TIMEOUT_S = 300  # the UI's first start on a loaded 2-core machine
WIDTH_PX = 1440  # a laptop's browser window: the answer is on it unscrolled
NO_ASSISTANT = "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true')"


def chromium_or_skip() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        import playwright  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        if os.environ.get("NORMSWEEP_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium and Playwright are required here (.ci/run installs them)")
        pytest.skip("needs chromium (apt-get install chromium) and Playwright (pip install -e '.[screenshots]')")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_ui(tiny_sweep: TinySweep, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """`python -m src.ui` on the tiny sweep's store: (base URL, what it printed when it answered, its log)."""
    port = free_port()
    db = tiny_sweep.uri.removeprefix("sqlite:///")
    log = tmp_path_factory.mktemp("ui") / "ui.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "src.ui", "--port", str(port), f"paths.mlflow_db={db}"],
            cwd=REPO, env=ui_env(log.parent / "entry"), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while True:
            assert server.poll() is None, f"the UI exited:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, f"the UI did not answer within {UP_TIMEOUT_S} s"
                time.sleep(1)
        yield base, log.read_text(), log
    finally:
        stop_group(server)  # the server and the workers it started


@pytest.mark.slow
def test_the_ui_shows_the_answer(tiny_sweep: TinySweep, tiny_client: MlflowClient, mlflow_ui: tuple[str, str, Path]) -> None:
    chromium = chromium_or_skip()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    base, printed, log = mlflow_ui
    experiment_id = tiny_client.get_experiment_by_name(EXPERIMENT).experiment_id
    runs = tiny_client.search_runs([experiment_id])
    jobs = [r for r in runs if "norm" in r.data.tags]
    variants = sorted({r.data.tags["variant"] for r in jobs})
    sweep_run = next(r for r in runs if r.data.tags.get(SWEEP_TAG) == "true" and r.data.metrics)
    # The speed check is nested under the sweep that ran it, named for what it is; a tag chip shows its
    # key (the long verdict is kept under MLflow's own prefix, which the UI leaves out of the chips).
    (check,) = [r for r in runs if r.info.run_name == SPEED_CHECK_RUN_NAME]
    assert check.data.tags["mlflow.parentRunId"] in {r.info.run_id for r in runs if r.data.tags.get(SWEEP_TAG) == "true"}
    assert not any(k.startswith("normsweep.verdict") for r in runs for k in r.data.tags)
    # One worker on a 2-core machine (MLflow's default is 4), and the link printed is the one served.
    workers = max(1, len(os.sched_getaffinity(0)) // 2)
    said = " ".join(printed.split())  # its lines wrapped to 120 characters
    assert f"2 processes ({workers} server worker{'s' if workers != 1 else ''}; MLflow's job runner off)" in said
    assert f"{base}/#/experiments?workflowType=machine_learning" in printed
    assert f"{EXPERIMENT}: {ui_link(base, experiment_id)}" in printed

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": WIDTH_PX, "height": 900})
        context.set_default_timeout(120_000)
        context.add_init_script(NO_ASSISTANT)
        page = context.new_page()

        # From MLflow's home page, as a new user goes: the experiment by its name opens on its training
        # runs (not the GenAI overview), each sweep run unfolded over its jobs and its speed check,
        # with the results as columns; the chart view leads with the loss curves.
        page.goto(f"{base}/")
        page.get_by_text(EXPERIMENT, exact=True).first.click()
        page.locator(".ag-row").first.wait_for()
        # The GenAI view lists these runs under "Training runs"; the training view calls them "Runs".
        assert page.get_by_text("Training runs", exact=True).count() == 0, "the experiment opened on the GenAI view"
        assert "workflowType=machine_learning" in page.url
        for name in (f"sweep-{EXPERIMENT}", SPEED_CHECK_RUN_NAME, *(r.info.run_name for r in jobs)):
            page.get_by_role("link", name=name, exact=True).first.wait_for()  # unfolded: every job is a row
        assert {"test_loss", JOB_SPEED_METRIC} <= set(page.locator(".ag-header-cell").all_inner_texts())
        # A row per job, each with its word against the report's one reference (the table's `test loss vs`
        # column's): the reference's own rows say so, every other finished job names it.
        for job in jobs:
            row = page.locator(f".ag-center-cols-container .ag-row[row-id$='{job.info.run_id}']").first
            cell = row.locator(f".ag-cell[col-id='{column('tags', LOSS_VERDICT_TAG)}']")
            variant = job.data.tags["variant"]
            text = cell.inner_text() if variant in _finished(jobs) else ""
            if variant == REFERENCE:
                assert text.startswith(f"{REFERENCE_WORD}: "), text
            elif variant in _finished(jobs):
                assert text.split(" ")[0] in set(PairWord) and text.split(" ", 1)[1].startswith(f"vs {REFERENCE}: Δ "), text
        assert f"test loss vs {REFERENCE}" in table_rows(analyze(EXPERIMENT, tiny_sweep.uri))[0]
        page.locator("label", has=page.locator("input[value=CHART]")).click()
        first = page.locator("[data-testid='experiment-view-compare-runs-card'] h4").first
        first.wait_for()
        assert first.get_attribute("title") == "train/train_loss"

        # The experiment link: the training runs, grouped by variant, with the results as columns.
        page.goto(ui_link(base, experiment_id))
        page.locator(".ag-row").first.wait_for()
        for variant in variants:
            page.locator(f".ag-row[row-id^='tag.variant.{variant}.']").first.wait_for()
        headers = page.locator(".ag-header-cell").all_inner_texts()
        assert {"test_loss", JOB_SPEED_METRIC} <= set(headers), headers
        # The verdicts as columns, on screen without scrolling sideways, wide enough for the word and its reference.
        for name in (LOSS_VERDICT_TAG, SPEED_VERDICT_TAG):
            box = page.locator(".ag-header-cell", has_text=name).first.bounding_box()
            assert box is not None and box["x"] + box["width"] <= WIDTH_PX and box["width"] >= 200, (name, box)
        # Sorted as docs/mlflow-ui.md says (Sort -> sort/loss_verdict -> ascending): the reference's group first.
        page.get_by_text("Sort:").first.click()
        page.get_by_placeholder("Search").last.fill(LOSS_SORT_METRIC)
        page.get_by_text(LOSS_SORT_METRIC, exact=True).first.click()
        page.keyboard.press("Escape")
        page.get_by_text("Sort:").first.click()
        page.get_by_role("button", name="Sort ascending").click()
        page.keyboard.press("Escape")
        rows = page.locator(".ag-center-cols-container .ag-row")
        page.wait_for_function("() => location.hash.includes('orderByAsc=true')")
        page.locator(".ag-row[row-index='0']").first.wait_for()
        # The grid re-renders its rows after the sort reaches the address: wait for its first row (a loaded
        # machine read the rows of before the sort), then hold it to the reference's group.
        first = ".ag-center-cols-container .ag-row[row-index='0']"
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_function(f"() => document.querySelector(\"{first}\")?.getAttribute('row-id') === 'tag.variant.{REFERENCE}'",
                                   timeout=30_000)  # fmt: skip
        first_row = page.locator(first).get_attribute("row-id")
        assert first_row == f"tag.variant.{REFERENCE}", first_row
        # ...and filtered as it says: the search box takes `tags.loss_verdict LIKE '<word>%'`.
        search = page.locator("input[placeholder^='metrics.rmse']")
        query = f"tags.{LOSS_VERDICT_TAG} LIKE '{REFERENCE_WORD}%'"
        shown = 1 + sum(j.data.tags["variant"] == REFERENCE for j in jobs)  # its group row and its runs
        filtered = (f"() => {{ const r = [...document.querySelectorAll('.ag-center-cols-container .ag-row')]; "
                    f"return r.length === {shown} && r.every(x => x.getAttribute('row-id').startsWith('tag.variant.{REFERENCE}')) }}")
        # Typed right after the sort, the query twice left the grid at its 10 rows 30 s later on a loaded machine
        # (three runs beside two CPU hogs needed no second try): it is sent again, as a user would press Enter
        # again, until the grid shows it (the page polls its store, so it is never idle to wait for; each try is kept).
        tries = []
        for _ in range(3):
            search.fill(query)
            search.press("Enter")
            try:
                page.wait_for_function(filtered, timeout=20_000)
                break
            except PlaywrightTimeout:
                tries.append((search.input_value(), rows.count(), page.url))
        assert rows.count() == shown, ([r.get_attribute("row-id") for r in rows.all()], tries)
        assert len(tries) < 2, tries  # sent again once at most: a filter that takes three tries is a finding
        search.fill("")
        search.press("Enter")

        # The chart view: no run hidden (MLflow draws the first 10 by default), test loss as bars.
        page.locator("label", has=page.locator("input[value=CHART]")).click()
        toggles = page.locator("input.is-visibility-toggle-checkbox")
        toggles.first.wait_for(state="attached")  # the checkbox itself is drawn as an eye icon
        states = [toggles.nth(i).is_checked() for i in range(toggles.count())]
        assert len(states) >= len(jobs) and all(states), f"{states.count(False)} of {len(states)} rows hidden"
        page.get_by_placeholder("Search metric charts").fill("test_loss")
        card = page.locator("[data-testid='experiment-view-compare-runs-card']", has=page.locator("h4[title='test_loss']"))
        card.locator(".js-plotly-plot").wait_for()  # its section follows the curves: no scrolling to find it
        assert card.locator(".barlayer .point").count() >= 1, "test_loss is not drawn as bars"
        # Interval bars: each finished variant's loss_vs_ref with its 95% interval, one segment per variant.
        page.get_by_placeholder("Search metric charts").fill(interval_key(JOB_LOSS_METRIC))
        card = page.locator("[data-testid='experiment-view-compare-runs-card']", has=page.locator(f"h4[title='{interval_key(JOB_LOSS_METRIC)}']"))
        card.locator(".js-plotly-plot").wait_for()
        segments = card.locator(".scatterlayer .trace .js-line")
        assert segments.count() >= len(_finished(jobs)), segments.count()

        # The sweep run's Overview: the verdict (its description: the headline, the table, the figures)
        # and the per-variant aggregates; every tag chip with its key.
        page.goto(ui_link(base, experiment_id, sweep_run.info.run_id))
        page.get_by_text("normsweep verdict").first.wait_for()
        page.get_by_text("Show more").first.click()
        # The description fits beside "About this run": no figure or table widens it past the window.
        about = page.get_by_text("About this run").first.bounding_box()
        text = page.locator(".note-editor-preview-content").first.bounding_box()
        assert about is not None and text is not None and about["x"] + about["width"] <= WIDTH_PX, about
        assert text["x"] + text["width"] <= about["x"], (text, about)
        speed = page.locator("img[src*='report%2Fspeed.png']").first  # the UI's sanitizer drops alt
        speed.wait_for()
        assert speed.evaluate("img => img.naturalWidth") > 0, "speed.png did not load"
        body = page.locator("body").inner_text()
        assert "Speed (speed check" in body and CHECK_SPEED_HEADER in body
        for variant in variants:
            assert f"{SECTION}/{variant}.n_seeds" in body or variant not in _finished(jobs), variant
        browser.close()
    # The console says what a user needs: no line per request (uvicorn's access log), no Starlette warning.
    said = log.read_text()
    assert '"GET /' not in said and '"POST /' not in said and "DeprecationWarning" not in said, said[-3000:]


def _finished(jobs: list) -> set[str]:
    return {r.data.tags["variant"] for r in jobs if r.info.status == "FINISHED"}


def test_printed_links_carry_the_view() -> None:
    """Without a browser: every experiment link selects the training view and the shared view."""
    link = ui_link("http://host:5077", "3")
    assert link == "http://host:5077/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=normsweep"
    assert ui_link("http://host:5077", "3", "abc").endswith("/experiments/3/runs/abc?workflowType=machine_learning")


def test_sweep_definition_and_aggregates() -> None:
    """The parent's params are the keys that vary between jobs; its aggregates skip what is undefined."""
    jobs = [{"overrides": ["norm=a", f"seed={s}", "paths.mlflow_db=/x"]} for s in (0, 1)]
    jobs.append({"overrides": ["norm=b", "seed=0", "paths.mlflow_db=/x"]})
    assert sweep_params(jobs) == {"sweep.norm": "a,b", "sweep.seed": "0,1"}
    rows = [
        {"variant": "a", "finished": 2, "test_loss": 5.0, "test_loss_ci": 0.5, "tokens_per_sec": 100.0, "tokens_per_sec_ci": 10.0},
        {"variant": "b", "finished": 1, "test_loss": 6.0, "test_loss_ci": math.nan, "tokens_per_sec": math.nan, "tokens_per_sec_ci": math.nan},
    ]
    assert aggregate_metrics(rows) == {
        "sweep/a.n_seeds": 2.0, "sweep/a.test_loss.mean": 5.0, "sweep/a.test_loss.ci_low": 4.5,
        "sweep/a.test_loss.ci_high": 5.5, "sweep/b.n_seeds": 1.0, "sweep/b.test_loss.mean": 6.0,
    }  # fmt: skip


@pytest.mark.usefixtures("migrated_store")
def test_the_sweep_summary_goes_through_the_store(store: dict[str, str]) -> None:
    """The sweep run's params, aggregates, tables and verdict, the shared view and a run's dataset
    inputs, written through the Store's methods into a real store and read back."""
    import pandas as pd

    from src.tracking.datasets import log_datasets
    from src.tracking.store import Store
    from src.tracking.summary import TABLES, log_sweep_definition, log_sweep_summary
    from src.tracking.tags import NOTE_TAG
    from src.tracking.ui_view import VIEW_TAG, publish_view

    door = Store.connect(store["uri"])
    experiment = door.experiment_id("summary", store["artifacts"])
    run_id = door.create_run(experiment, "sweep", {NOTE_TAG: "3 jobs finished."})
    jobs = [{"overrides": ["norm=a", f"seed={s}"]} for s in (0, 1)] + [{"overrides": ["norm=b", "seed=0"]}]
    log_sweep_definition(door, run_id, jobs)
    rows = [{"variant": "a", "finished": 2, "test_loss": 5.0, "test_loss_ci": 0.5, "tokens_per_sec": 100.0, "tokens_per_sec_ci": 10.0}]
    table = pd.DataFrame({"variant": ["a"], "test loss": [5.0]})
    log_sweep_summary(door, run_id, rows, table, pd.DataFrame(), "a differs")
    log_sweep_summary(door, run_id, rows, table, table, "a is equivalent")  # a report made again replaces its verdict
    publish_view(door, experiment)
    log_datasets(door, run_id, "corpus-r50k", {"train": {"tokens": 10, "documents": 2, "sha256": "ab"}}, ["train"])

    client = MlflowClient(store["uri"])
    run = client.get_run(run_id)
    assert run.data.params == {"sweep.norm": "a,b", "sweep.seed": "0,1", "sweep.n_jobs": "3"}
    assert run.data.metrics == aggregate_metrics(rows)
    assert run.data.tags[NOTE_TAG] == "a is equivalent\n\n3 jobs finished."
    assert {f.path for f in client.list_artifacts(run_id, "report")} == set(TABLES.values())
    # The report made again replaces its tables (MLflow's log_table appended: two rows of variant a),
    # still shown as tables by MLflow's artifact viewer.
    for name in ("variants", "comparisons"):
        shown = json.loads(door.read_text(run_id, TABLES[name]))  # MLflow's table format (`orient="split"`)
        assert (shown["columns"], shown["data"]) == (["variant", "test loss"], [["a", 5.0]]), (name, shown)
    assert {"path": TABLES["variants"], "type": "table"} in json.loads(run.data.tags["mlflow.loggedArtifacts"])
    assert VIEW_TAG in client.get_experiment(experiment).tags
    assert [(d.dataset.name, d.tags[0].value) for d in run.inputs.dataset_inputs] == [("corpus-r50k", "train")]


@pytest.mark.usefixtures("migrated_store")
def test_interval_bars_are_written_once_per_generation(store: dict[str, str]) -> None:
    """Each job's interval as three points of a step metric (low, estimate, high) at its variant's place; a
    report made again over the same intervals writes nothing, one whose intervals changed writes every job
    into a new block of steps, which the view's interval cards then show alone."""
    from src.tracking.intervals import BLOCK, GENERATION, interval_key, log_job_intervals
    from src.tracking.store import Store
    from src.tracking.summary import JOB_LOSS_METRIC
    from src.tracking.ui_view import VIEW_TAG, publish_view

    door = Store.connect(store["uri"])
    experiment = door.experiment_id("intervals", store["artifacts"])
    jobs = [(door.create_run(experiment, f"{v}-s0", {"variant": v}), v) for v in ("ref", "b")]
    places = {"ref": 1, "b": 2}
    first = {"ref": {JOB_LOSS_METRIC: (0.0, 0.0, 0.0)}, "b": {JOB_LOSS_METRIC: (-0.1, 0.02, 0.15)}}
    assert log_job_intervals(door, experiment, jobs, first, places) == 0
    assert log_job_intervals(door, experiment, jobs, first, places) == -1  # the same again: nothing written
    client = MlflowClient(store["uri"])
    history = sorted((m.step, m.value) for m in client.get_metric_history(jobs[1][0], interval_key(JOB_LOSS_METRIC)))
    assert history == [(2 * BLOCK, -0.1), (2 * BLOCK + 1, 0.02), (2 * BLOCK + 2, 0.15)]
    changed = {**first, "b": {JOB_LOSS_METRIC: (-0.05, 0.01, 0.07)}}
    assert log_job_intervals(door, experiment, jobs, changed, places) == 1
    steps = {m.step for m in client.get_metric_history(jobs[0][0], interval_key(JOB_LOSS_METRIC))}
    assert steps == {BLOCK, BLOCK + 1, BLOCK + 2, GENERATION + BLOCK, GENERATION + BLOCK + 1, GENERATION + BLOCK + 2}
    publish_view(door, experiment)
    import json

    cards = json.loads(client.get_experiment(experiment).tags[VIEW_TAG])["compareRunCharts"]
    (card,) = [c for c in cards if c["metricKey"] == interval_key(JOB_LOSS_METRIC)]
    assert card["type"] == "LINE" and card["range"]["xMin"] < GENERATION + BLOCK < GENERATION + 2 * BLOCK + 2 < card["range"]["xMax"]
    assert card["range"]["xMin"] > BLOCK + 2  # the replaced generation out of view
