"""Each value has one owner: the store location reaches every reader; the late stages do not load torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from mlflow.tracking import MlflowClient

from src.paths import compose, tracking_uri
from src.report.__main__ import main as report_main
from src.tracking.store import Store


@pytest.mark.parametrize("modules", ["src.report, src.report.status", "src.paths, src.tracking.identity, src.tracking.sweep, src.training.budget"])
def test_late_stages_do_not_import_torch(modules: str) -> None:
    code = f"import sys; import {modules}; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_store_override_reaches_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "elsewhere.db"
    uri = tracking_uri([f"paths.mlflow_db={db}"])
    assert uri == f"sqlite:///{db}" == compose([f"paths.mlflow_db={db}"]).logger.tracking_uri
    client = MlflowClient(uri)
    exp = Store.connect(uri).experiment_id("moved", str(tmp_path / "artifacts"))
    run = client.create_run(exp, run_name="torch_layernorm-s0", tags={"norm": "torch_layernorm", "seed": "0", "outcome": "finished"})
    for key, value in {"train_time_s": 2.0, "avg_tokens_per_sec": 100.0, "test_loss": 5.5, "steps_done": 4.0}.items():
        client.log_metric(run.info.run_id, key, value, step=4)
    client.set_terminated(run.info.run_id, "FINISHED")

    args = ["--experiment", "moved", "--no-summary-run", f"paths.mlflow_db={db}", f"paths.reports_dir={tmp_path / 'r'}"]
    assert report_main(args) == 0
    out = capsys.readouterr().out
    assert "torch_layernorm" in out and "5.5000" in out
    assert (tmp_path / "r" / "moved" / "report.md").is_file()
