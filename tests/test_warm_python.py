"""The tests' warm jobs (tests/warm_python.py) end as cold ones: the same status, output, argv,
folder, environment and stdin, the interpreter's own exit, and subprocess.run's timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import warm_python
from helpers import REPO, cli_env

PROBE = "tests.warm_probe"


def both(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    env = cli_env()
    cold = subprocess.run([sys.executable, "-m", PROBE, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    zygote = warm_python.zygote_for(env)
    assert zygote is not None, "the warm interpreter did not start (or a Python thread was running in it)"
    return zygote.run(PROBE, list(args), timeout), cold


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(("torch loaded before", "pid "))]


@pytest.mark.parametrize("args", [["exit", "3"], ["exit", "0"], ["raise"], ["signal"], ["ends"]])
def test_a_warm_job_ends_as_a_cold_one(args: list[str]) -> None:
    warm, cold = both(*args)
    assert "torch loaded before: True" in warm.stderr and "torch loaded before: False" in cold.stderr  # it was forked warm
    assert warm.returncode == cold.returncode, (warm, cold)
    assert warm.stdout == cold.stdout, (warm.stdout, cold.stdout)
    if args == ["raise"]:  # the traceback's frames differ (runpy's, the zygote's); its end does not
        assert warm.returncode == 1 and lines(warm.stderr)[-1] == lines(cold.stderr)[-1] == "ValueError: the probe's own error"
    else:
        assert lines(warm.stderr) == lines(cold.stderr), (warm.stderr, cold.stderr)
    expected = int(args[1]) if args[0] == "exit" else {"raise": 1, "signal": -15, "ends": 0}[args[0]]
    assert warm.returncode == expected
    if args == ["ends"]:
        assert warm.stdout.splitlines()[-3:] == ["buffered, not flushed", "thread finished", "atexit ran"]


def test_a_warm_job_past_its_timeout_is_killed_as_subprocess_run_kills_it() -> None:
    zygote = warm_python.zygote_for(cli_env())
    assert zygote is not None
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        zygote.run(PROBE, ["sleep", "30"], timeout=2)
    assert time.monotonic() - started < 20
    pid = int(expired.value.stderr.split("pid ")[1].split()[0])
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:  # a zombie until its fork reaps it
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")


def test_the_training_command_is_forked_warm_and_says_what_a_cold_one_says() -> None:
    env = cli_env()
    for args in (["--help"], ["norm=nope"], ["optim.lr=abc"]):
        warm = warm_python.run("src.train", args, env, timeout=120)
        cold = subprocess.run([sys.executable, "-m", "src.train", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm_python.zygote_for(env) is not None


def test_an_environment_of_its_own_starts_the_job_cold(monkeypatch: pytest.MonkeyPatch) -> None:
    assert warm_python.zygote_for(cli_env()) is not None  # this worker's warm interpreter is up
    monkeypatch.setenv("NORMSWEEP_PROBE", "changed")  # were it read at import, a fork could not honour it
    env = cli_env()
    assert warm_python.zygote_for(env) is None
    proc = warm_python.run(PROBE, ["exit", "0"], env, timeout=60)
    assert "torch loaded before: False" in proc.stderr and "env changed" in proc.stdout
