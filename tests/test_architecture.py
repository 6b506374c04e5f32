"""Each value has one owner: the store location reaches every reader; the late stages do not load torch."""

from __future__ import annotations

import ast
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


SRC = REPO / "src"
TRACKING = SRC / "tracking"
STORE_MODULE = TRACKING / "store.py"


def _imported_modules(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def _calls_named(tree: ast.AST, name: str) -> int:
    return sum(
        isinstance(node, ast.Call)
        and ((isinstance(node.func, ast.Name) and node.func.id == name)
             or (isinstance(node.func, ast.Attribute) and node.func.attr == name))
        for node in ast.walk(tree)
    )  # fmt: skip


def test_the_store_has_one_door() -> None:
    """Only src/tracking talks to MLflow, only its store module builds a client, and file locks go
    through one library (src.locks): no hand-written flock anywhere."""
    sources = sorted(SRC.rglob("*.py"))
    assert STORE_MODULE in sources and len(sources) > 30  # the scan sees the package
    outside, clients, flock = [], [], []
    for path in sources:
        text = path.read_text()
        tree = ast.parse(text, str(path))
        where = str(path.relative_to(REPO))
        if TRACKING not in path.parents and any(m.split(".")[0] == "mlflow" for m in _imported_modules(tree)):
            outside.append(where)
        if path != STORE_MODULE and _calls_named(tree, "MlflowClient"):
            clients.append(where)
        if "fcntl" in _imported_modules(tree) or "flock(" in text:
            flock.append(where)
    assert not outside, f"MLflow imported outside src/tracking (use src.tracking.store.Store): {outside}"
    assert not clients, f"MlflowClient built outside src/tracking/store.py: {clients}"
    assert not flock, f"hand-written file locks (use src.locks): {flock}"
    assert _calls_named(ast.parse(STORE_MODULE.read_text()), "MlflowClient") >= 1  # the door itself is found
