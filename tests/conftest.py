"""Shared fixtures: one token cache per test session and tiny-run overrides for real training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A GPT-2 small enough that a real Lightning fit of a few steps takes seconds on two cores.
TINY_MODEL = [
    "model.n_layers=1",
    "model.emb_dim=32",
    "model.n_heads=2",
    "model.context_length=32",
    "optim.micro_batch_size=4",
    "optim.max_steps=4",
    "val_every_n_steps=2",
    "data.val_max_windows=4",
    "data.test_max_windows=4",
    "progress_bar=false",
]


@pytest.fixture(scope="session")
def token_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data cache for the whole session: the corpus is tokenized once, then reused."""
    return tmp_path_factory.mktemp("token_cache")


@pytest.fixture
def store(tmp_path: Path) -> dict[str, str]:
    """A fresh MLflow store (SQLite + artifact folder) for one test."""
    return {
        "db": str(tmp_path / "mlflow.db"),
        "uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "artifacts": str(tmp_path / "mlartifacts"),
    }


@pytest.fixture
def tiny_overrides(token_cache_dir: Path, store: dict[str, str], tmp_path: Path) -> list[str]:
    """Overrides for a few-step run that writes only under tmp_path and the session cache."""
    return [
        *TINY_MODEL,
        f"paths.cache_dir={token_cache_dir}",
        f"paths.mlflow_db={store['db']}",
        f"paths.mlflow_artifacts={store['artifacts']}",
        f"paths.checkpoints_dir={tmp_path / 'checkpoints'}",
        f"paths.reports_dir={tmp_path / 'reports'}",
        f"hydra.run.dir={tmp_path / 'outputs'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]


def run_cli(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `python -m <module> <args>` from the repo root, as a user would."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
