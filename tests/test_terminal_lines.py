"""Every line normsweep prints fits 120 characters, and only normsweep's lines are printed.

normsweep's own messages (`[normsweep] ...`) all go through src.core.terminal.say, which wraps them:
the source is read here for any `print("[normsweep] ...")` that would bypass it, and the lines that
were longest (SLURM's submission and requeue, a node job's start) are printed through it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from src.core.terminal import WIDTH, say
from src.launch.slurm_launcher import requeued_line
from src.tracking.store import QUIET_MLFLOW_ENV, Store

SRC = Path(__file__).resolve().parent.parent / "src"
PREFIX = "[normsweep]"


def _opening(node: ast.expr) -> str | None:
    """The literal text a print's first argument starts with (a string or an f-string's first part)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def test_no_message_of_ours_is_printed_around_the_wrapping() -> None:
    bypass = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and node.args:
                text = _opening(node.args[0])
                if text is not None and text.startswith(PREFIX):
                    bypass.append(f"{path.relative_to(SRC.parent)}:{node.lineno}")
    assert not bypass, f"print {PREFIX} lines through src.core.terminal.say (it wraps them): {bypass}"


def test_the_longest_messages_fit_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    overrides = " ".join(f"hydra.launcher.key_{i}=value_{i}" for i in range(30))  # a SLURM job's overrides: ~500 characters
    say(f"{PREFIX} submitting #0: {overrides}")
    say(requeued_line(1, "4242", 2))
    say(f"{PREFIX} job #1 on 2 processes: {overrides}")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) > 3 and max(map(len, lines)) <= WIDTH, max(lines, key=len)
    assert " ".join(out.split()) == " ".join(f"{PREFIX} submitting #0: {overrides} {requeued_line(1, '4242', 2)} "
                                             f"{PREFIX} job #1 on 2 processes: {overrides}".split())  # fmt: skip


def test_mlflow_is_told_to_keep_its_own_lines_to_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a store turns off MLflow's download bars and its `View run` lines, unless the user set them."""
    from mlflow.environment_variables import (
        MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR,
        MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT,
    )

    for key in QUIET_MLFLOW_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")  # the user's choice stands
    Store("sqlite:////nonexistent/mlflow.db")
    assert MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.get() is True
    assert MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get() is True
