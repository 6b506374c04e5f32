"""`python -m src.train ...` for the tests that wait for it to end, forked from a warm interpreter.

About 80% of the suite's CPU went to fresh interpreters importing torch, Lightning and MLflow (6-8 s
of CPU each, before the job's first line of its own). A test that runs a job to its end and reads its
exit status, its output and what it recorded needs a process of its own, not those imports paid again:
each pytest-xdist worker starts one interpreter that has imported them (tests/warm_zygote.py), and
each such job is a fork of it, in the repository, with the user's environment (`cli_env()`), its own
stdin, stdout and stderr, and the interpreter's own exit.

What stays a cold `python -m`: a test whose fact is the start itself (what a refusal imports, a
patch's environment switch), one that signals or watches a running job (`launch_sweep`, Popen), a
job run from another folder (a copy of the code) or with an environment of its own (PYTHONPATH for a
user's norm, a monkeypatched variable): `run` forks only when the environment and the folder are the
warm interpreter's, and otherwise starts the process cold, as before. NORMSWEEP_COLD_TESTS=1 starts
every one cold.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from src.core.parent_death import terminated_with_parent

REPO = Path(__file__).resolve().parents[1]
ZYGOTE = Path(__file__).with_name("warm_zygote.py")
COLD_ENV = "NORMSWEEP_COLD_TESTS"
VOLATILE = {"PYTEST_CURRENT_TEST"}  # pytest's own, different in every test

_lock = threading.Lock()
_warm: _Zygote | None | bool = None  # False: tried, not available in this worker


class _Zygote:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.folder = Path(tempfile.mkdtemp(prefix="normsweep-warm-"))
        self.socket = str(self.folder / "zygote.sock")
        self.proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE), self.socket], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=terminated_with_parent(),
        )  # fmt: skip
        ready = json.loads(self.proc.stdout.readline() or "{}")
        self.usable = ready.get("threads") == 1
        atexit.register(self.stop)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for leftover in self.folder.iterdir():
            leftover.unlink()
        self.folder.rmdir()

    def run(self, module: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        out, err = self.folder / f"{os.getpid()}-{threading.get_ident()}.out", self.folder / f"{os.getpid()}-{threading.get_ident()}.err"
        request = {"module": module, "args": args, "cwd": str(REPO), "env": {**self.env, **_volatile()},
                   "stdout": str(out), "stderr": str(err)}  # fmt: skip
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket)
            conn.sendall((json.dumps(request) + "\n").encode())
            replies = conn.makefile("r")
            pid = int(replies.readline())
            conn.settimeout(timeout)
            try:
                status = replies.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)  # as subprocess.run kills its child at the timeout
                raise subprocess.TimeoutExpired([sys.executable, "-m", module, *args], timeout, _text(out), _text(err)) from None
        try:
            code = os.waitstatus_to_exitcode(int(status))  # a signal's death reads -N, as in subprocess
            return subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, _text(out), _text(err))
        finally:
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)


def _volatile() -> dict[str, str]:
    return {k: os.environ[k] for k in VOLATILE if k in os.environ}


def _text(path: Path) -> str:
    """The file as `subprocess.run(text=True)` reads a pipe: the locale's encoding, universal newlines."""
    data = path.read_bytes() if path.exists() else b""
    return io.TextIOWrapper(io.BytesIO(data)).read()


def _without_volatile(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in VOLATILE}


def zygote_for(env: dict[str, str]) -> _Zygote | None:
    """This worker's warm interpreter where it can run a job with `env`, else None. It starts on first
    use, from the main thread (its parent-death signal is tied to the thread that starts it), with a
    user's environment (`cli_env()`); a job whose environment differs from it is not its to run."""
    from helpers import cli_env  # helpers imports this module

    global _warm
    if os.environ.get(COLD_ENV) == "1":
        return None
    with _lock:
        if _warm is None and threading.current_thread() is threading.main_thread():
            zygote = _Zygote(cli_env())
            _warm = zygote if zygote.usable else False
    warm = _warm or None
    return warm if warm is not None and _without_volatile(warm.env) == _without_volatile(env) else None


def run(module: str, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m module args` from the repository with `env`, to its end: forked warm where it can be."""
    zygote = zygote_for(env)
    if zygote is not None:
        return zygote.run(module, args, timeout)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
