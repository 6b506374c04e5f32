"""`python -m src.bench interpreter`: a tiny job's CPU on another interpreter against this one
(src/bench/interpreter.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, cli_env

from src.bench.__main__ import main


@pytest.mark.parametrize("given", ["missing", "folder", "not_executable"])
def test_another_python_that_cannot_run_is_refused_naming_the_option(
    given: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = {"missing": tmp_path / "nope", "folder": tmp_path, "not_executable": tmp_path / "python"}[given]
    if given == "not_executable":
        path.write_text("")
    with pytest.raises(SystemExit) as stopped:
        main(["interpreter", "--python", str(path)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--python" in err and f"{path} is not an executable file" in err, err


@pytest.mark.slow  # three real tiny jobs: the untimed first, then one on each side of the pair
def test_the_interpreter_bench_times_a_job_on_each(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "src.bench", "interpreter", "--python", sys.executable, "--pairs", "1", "--out", str(tmp_path)],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "interpreter.json").read_text())
    assert report["pairs"] == 1 and report["other"] == report["this"]
    # A job's CPU is its imports and its few steps: a second or more each, on any machine.
    assert all(len(report["cpu_s"][side]) == 1 and report["cpu_s"][side][0] > 1.0 for side in ("this", "other"))
    ratio = report["other_over_this"]
    assert ratio["ratio"] == pytest.approx(report["cpu_s"]["other"][0] / report["cpu_s"]["this"][0])
    assert math.isnan(ratio["low"])  # one pair: no interval, and none printed
    said = (tmp_path / "interpreter.md").read_text()
    assert "| 1 |" in said and said.rstrip().endswith(f"other / this: {ratio['ratio']:.2f}×"), said
    assert report["versions"]["this"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
