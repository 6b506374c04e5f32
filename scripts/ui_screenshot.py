"""PNG screenshots of the MLflow UI on a sweep, taken in headless Chromium.

    python scripts/ui_screenshot.py [--out docs/img] [overrides ...]

The overrides are the training config's (`experiment=norm_sweep paths.mlflow_db=/x/mlflow.db`): they
pick the store, exactly as for `python -m src.ui`, and the experiment (its `experiment_name`). The
script starts `python -m src.ui` on a free localhost port, waits until it answers, and clicks
through the UI the way docs/mlflow-ui.md tells a user to:

- `home.png`: the experiment clicked on MLflow's home page: its training runs, the sweep run unfolded over its
  jobs and its speed check, the results as columns,
- `charts.png`: the same in the chart view as it opens: the loss curves first (log axis), then test loss
  and the speed estimate; the sweep and speed-check runs (no curves) hidden from the charts,
- `job.png`: a training job's own page on its charts tab: its loss curve first,
- `runs.png`: the experiment from the link `make ui` prints: runs grouped by variant, results as columns,
- `results.png`: the chart view searched for `test_loss`: one bar per variant, and the sweep's aggregates,
- `speed.png`: the chart view searched for the speed estimate: one bar per variant, and its interval's bounds,
- `sweep.png`: the sweep run's Overview, with its verdict (description) and aggregate metrics,
- `report.png`: the sweep run's artifacts with `report/report.html` open,

then stops the server. MLflow's UI is a JavaScript app, so a plain `chromium --screenshot` can only
photograph the first page as it loads; Playwright drives the system's Chromium instead (no browser
download), to click, and to wait for the tables and charts to render.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `import src` from the checkout this script lives in

from src.core import paths  # noqa: E402
from src.core.process_group import stop_group  # noqa: E402
from src.report.read.runs import ReportError, find_experiment, open_store  # noqa: E402
from src.tracking.store_uri import StoreError  # noqa: E402
from src.tracking.summary import JOB_SPEED_METRIC  # noqa: E402
from src.tracking.sweep import latest_sweep_run  # noqa: E402
from src.tracking.ui_view import ui_link  # noqa: E402

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_HINT = "headless Chromium is needed: on Debian/Ubuntu `sudo apt-get install -y chromium`"
PLAYWRIGHT_HINT = "Playwright drives Chromium here: `.venv/bin/pip install -e '.[screenshots]'`"
REPORT_PATH = "report/report.html"
TRAINING_VIEW = "workflowType=machine_learning"  # MLflow's training view (ui_link adds it too)
# A fresh browser profile opens MLflow's assistant panel over a third of the page on its first load.
NO_ASSISTANT = "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true')"
HEADLINE_METRIC = "test_loss"
JOB_PAGE_CHARTS = "model-metrics"  # a run page's charts tab, in its address


def find_chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit(f"ui_screenshot: no {' / '.join(CHROMIUM_NAMES)} on PATH; {CHROMIUM_HINT}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, server: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(
                f"ui_screenshot: the MLflow UI exited ({server.returncode}):\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise SystemExit(f"ui_screenshot: the MLflow UI did not answer at {url} within {timeout_s:.0f} s")


def shrink(png: Path, max_width: int) -> None:
    """Keep the committed pictures small: scale down to max_width and quantize to a palette."""
    from PIL import Image

    with Image.open(png) as image:
        image = image.convert("RGB")
        if image.width > max_width:
            image = image.resize((max_width, round(image.height * max_width / image.width)), Image.LANCZOS)
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)


def settle(page, ms: int) -> None:
    """Give the page time to draw what it fetched. (It never goes network-idle: MLflow keeps polling.)"""
    page.wait_for_timeout(ms)


def photograph(
    chromium: str,
    base: str,
    experiment_id: str,
    experiment_name: str,
    sweep_run_id: str | None,
    job_run_id: str | None,
    out: Path,
    size: tuple[int, int],
    settle_ms: int,
) -> list[Path]:
    from playwright.sync_api import sync_playwright

    shots: list[Path] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-sync"],
        )
        context = browser.new_context(viewport={"width": size[0], "height": size[1]})
        context.set_default_timeout(120_000)  # a loaded machine renders slowly; fail only when stuck
        context.add_init_script(NO_ASSISTANT)
        page = context.new_page()

        # As a new user finds it: MLflow's home page, then the experiment by its name.
        page.goto(f"{base}/")
        page.get_by_text(experiment_name, exact=True).first.wait_for()
        settle(page, settle_ms // 2)
        page.get_by_text(experiment_name, exact=True).first.click()
        page.locator(".ag-row").first.wait_for()
        settle(page, settle_ms)
        shots.append(out / "home.png")
        page.screenshot(path=shots[-1])

        page.locator("label", has=page.locator("input[value=CHART]")).click()  # the chart-view button
        page.locator(".js-plotly-plot, canvas").first.wait_for()
        settle(page, settle_ms)
        shots.append(out / "charts.png")  # as it opens: the loss curves first
        page.screenshot(path=shots[-1])

        if job_run_id is not None:  # a job's page, as a click on its name opens it, on its charts tab
            page.goto(f"{base}/#/experiments/{experiment_id}/runs/{job_run_id}/{JOB_PAGE_CHARTS}?{TRAINING_VIEW}")
            page.locator(".js-plotly-plot, canvas").first.wait_for()
            settle(page, settle_ms)
            shots.append(out / "job.png")
            page.screenshot(path=shots[-1])

        page.goto(ui_link(base, experiment_id))  # the link `make ui` prints: normsweep's shared view
        page.locator(".ag-row").first.wait_for()
        settle(page, settle_ms)
        shots.append(out / "runs.png")
        page.screenshot(path=shots[-1])
        page.locator("label", has=page.locator("input[value=CHART]")).click()
        page.locator(".js-plotly-plot, canvas").first.wait_for()

        # The headline numbers as values: the job's test loss, one bar per variant (mean of its seeds).
        page.get_by_placeholder("Search metric charts").fill(HEADLINE_METRIC)
        card = page.locator("[data-testid='experiment-view-compare-runs-card']", has=page.locator(f"h4[title='{HEADLINE_METRIC}']"))
        card.wait_for()  # its section comes third, after the curves: on the first screen once searched
        settle(page, settle_ms)
        shots.append(out / "results.png")
        page.screenshot(path=shots[-1])

        # The speed check's estimate each job carries: one bar per variant, on one chart.
        page.get_by_placeholder("Search metric charts").fill(JOB_SPEED_METRIC)
        card = page.locator("[data-testid='experiment-view-compare-runs-card']", has=page.locator(f"h4[title='{JOB_SPEED_METRIC}']"))
        card.wait_for()
        settle(page, settle_ms)
        shots.append(out / "speed.png")
        page.screenshot(path=shots[-1])

        if sweep_run_id is not None:
            page.goto(ui_link(base, experiment_id, sweep_run_id))
            page.get_by_text("normsweep verdict").first.wait_for()
            page.get_by_text("Show more").first.click()  # MLflow folds a long description
            settle(page, settle_ms)
            shots.append(out / "sweep.png")
            page.screenshot(path=shots[-1], full_page=True)

        if sweep_run_id is not None:
            page.goto(
                f"{base}/#/experiments/{experiment_id}/runs/{sweep_run_id}/artifacts/{REPORT_PATH}?{TRAINING_VIEW}"
            )
            page.locator("iframe").first.wait_for()
            settle(page, settle_ms)
            shots.append(out / "report.png")
            page.screenshot(path=shots[-1])
        browser.close()
    return shots


def with_own_ui(overrides: list[str], use: Callable[[str], list[Path]]) -> list[Path]:
    """Start `python -m src.ui` on a free localhost port, call use(base_url), stop the server."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="ui-shot-") as tmp:
        log = Path(tmp) / "mlflow-ui.log"
        with log.open("w") as log_file:
            # Its own process group, so the server and the workers it forks stop together at the end.
            server = subprocess.Popen(
                [sys.executable, "-m", "src.ui", "--port", str(port), *overrides],
                cwd=ROOT,
                start_new_session=True,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until_up(f"{base}/health", server, log, timeout_s=300)
            return use(base)
        finally:
            stop_group(server)  # the server and the workers it started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/ui_screenshot.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNGs (default: docs/img)"
    )
    parser.add_argument("--width", type=int, default=1440, help="the browser's width: the result columns fit 1440 px")
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--max-width", type=int, default=1440, help="scale the saved PNGs down to this width")
    parser.add_argument(
        "--settle-ms", type=int, default=5000, help="wait this long for a page to draw once it is there"
    )
    parser.add_argument(
        "--url", help="photograph a UI already running on the same store (e.g. http://127.0.0.1:5000)"
    )
    parser.add_argument("overrides", nargs="*", help="training config overrides, e.g. experiment=norm_sweep")
    args = parser.parse_args(argv)

    chromium = find_chromium()
    try:
        import playwright  # noqa: F401
    except ImportError:
        raise SystemExit(f"ui_screenshot: the playwright package is missing; {PLAYWRIGHT_HINT}") from None
    uri = paths.tracking_uri(args.overrides)
    experiment = str(paths.compose(args.overrides).experiment_name)
    try:
        store = open_store(uri)
        experiment_id = find_experiment(store, experiment)
    except (ReportError, StoreError) as error:  # no store there, or no such experiment: say so, no traceback
        raise SystemExit(f"ui_screenshot: {error}") from None
    sweep = latest_sweep_run(store, experiment_id)
    sweep_id = sweep.info.run_id if sweep else None
    jobs = [r for r in store.runs(experiment_id, f"metrics.`{JOB_SPEED_METRIC}` > -1e9") if r.info.status == "FINISHED"]
    job_id = jobs[0].info.run_id if jobs else None  # a job the speed check timed
    size = (args.width, args.height)
    if sweep is None:
        print(
            f"ui_screenshot: experiment {experiment!r} has no sweep run: no nesting, no report picture",
            file=sys.stderr,
        )

    args.out.mkdir(parents=True, exist_ok=True)

    def shoot(base: str) -> list[Path]:
        return photograph(chromium, base, experiment_id, experiment, sweep_id, job_id, args.out, size, args.settle_ms)

    shots = shoot(args.url.rstrip("/")) if args.url else with_own_ui(args.overrides, shoot)
    for png in shots:
        shrink(png, args.max_width)
        print(f"{png} ({png.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
