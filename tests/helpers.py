"""Plain helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def cli_env() -> dict[str, str]:
    """A user's environment: Hydra's short errors, no tracking URI leaking in from the shell."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def run_cli(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `python -m <module> <args>` from the repo root, as a user would."""
    env = cli_env()
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
