"""Plain helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


# Fewer steps still: sweeps of many jobs (test_variants.py's 16, in three multiruns).
FAST = [*TINY_MODEL, "optim.max_steps=2", "val_every_n_steps=2", "data.val_max_windows=2", "data.test_max_windows=2"]


def cli_env() -> dict[str, str]:
    """A user's environment: Hydra's short errors, no tracking URI leaking in from the shell."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def ui_env(root: Path) -> dict[str, str]:
    """A user's environment where MLflow finds normsweep's UI app by the `mlflow.app` entry point that
    pyproject.toml declares, as `pip install -e .` installs it (a dist-info under `root`, on the path):
    the UI tests hold whether or not this venv was installed from this checkout's pyproject."""
    section = (REPO / "pyproject.toml").read_text().partition('[project.entry-points."mlflow.app"]\n')[2]
    entry = section.partition("\n")[0]  # normsweep = "src.tracking.ui_app:app"
    name, _, value = entry.partition(" = ")
    assert name == "normsweep" and value.startswith('"src.tracking.ui_app:'), entry
    info = root / "normsweep_ui_entry-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: normsweep-ui-entry\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[mlflow.app]\n{name} = {value.strip(chr(34))}\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
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


def run_train(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m src.train <args>` run in this process, as `run_cli` runs it in a new one (a user's
    environment, the repo as the working folder), for refusals: the same entry point and exit code
    without a second interpreter importing the stack (seconds each). The environment, argv, working
    folder and logging the entry point and Hydra change are restored; one subprocess test per path
    keeps the process-level contract (run_cli)."""
    import io
    import logging
    import runpy

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    # Hydra's process-wide state: a multirun leaves HydraConfig in MULTIRUN mode, which would make the
    # next in-process job of this worker a sweep's job (src.core.cli.in_multirun).
    saved_hydra, hydra_was_up = HydraConfig.instance().cfg, GlobalHydra.instance().is_initialized()
    saved_env, saved_argv, saved_cwd = dict(os.environ), list(sys.argv), os.getcwd()
    root = logging.getLogger()
    saved_logging = (list(root.handlers), root.level)
    out, err = io.StringIO(), io.StringIO()
    env = cli_env()  # read before the clear: cli_env() copies this process's environment
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["src.train", *args]
    os.chdir(REPO)
    code: object = 0
    imported = sys.modules.pop("src.train", None)  # run as __main__, as `python -m` runs it (runpy warns otherwise)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_module("src.train", run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
    finally:
        if imported is not None:
            sys.modules["src.train"] = imported
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        root.handlers[:] = saved_logging[0]
        root.setLevel(saved_logging[1])
        HydraConfig.instance().cfg = saved_hydra
        if not hydra_was_up:
            GlobalHydra.instance().clear()
    if not isinstance(code, int):  # a one-line SystemExit message, printed as Python would
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess(["src.train", *args], code, out.getvalue(), err.getvalue())


# `python -m src.train`, its wait for a restarting server (SERVER_RESTART_S, 60 s) cut to 2 s: for a
# job whose server is killed for good, the same ride-out then ServerLost, 58 s sooner (the wait itself:
# tests/test_team_server.py).
SHORT_RESTART_WAIT = """
import runpy, sys
from src.tracking import server_client
server_client.SERVER_RESTART_S = 2.0
sys.argv = ["src.train", *sys.argv[1:]]
runpy.run_module("src.train", run_name="__main__")
"""


def train_entry(short_restart_wait: bool = False) -> list[str]:
    """The interpreter's arguments that start `python -m src.train` (SHORT_RESTART_WAIT's where asked)."""
    return ["-c", SHORT_RESTART_WAIT] if short_restart_wait else ["-m", "src.train"]


def launch_sweep(cwd: Path, *args: str, short_restart_wait: bool = False) -> subprocess.Popen[str]:
    """`python -m src.train -m <args>` from `cwd`, in a session of its own, its output on one pipe."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, *train_entry(short_restart_wait), "-m", *args],
        cwd=cwd, env={**cli_env(), "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def node_sweep_args(root: Path, cache: Path, uri: str, experiment: str, *extra: str) -> list[str]:
    """A sweep as a second node would start it: only the tracking server is shared."""
    return [
        *TINY_MODEL,
        f"experiment_name={experiment}",
        f"logger.tracking_uri={uri}",
        f"logger.artifact_location={root / 'artifacts'}",
        "logger.system_metrics_s=0",
        f"paths.cache_dir={cache}",
        f"paths.checkpoints_dir={root / 'checkpoints'}",
        f"paths.reports_dir={root / 'reports'}",
        f"hydra.sweep.dir={root / 'multirun'}",
        *extra,
    ]


def run_sweep(root: Path, cache: Path, experiment: str, *overrides: str) -> str:
    """A FAST multirun into `root`'s store (its report in root/reports/<experiment>); its output."""
    proc = run_cli(
        "src.train", "-m", *FAST, f"experiment_name={experiment}", f"paths.cache_dir={cache}",
        f"paths.mlflow_db={root / 'mlflow.db'}", f"paths.mlflow_artifacts={root / 'mlartifacts'}",
        f"paths.reports_dir={root / 'reports'}", f"hydra.sweep.dir={root / experiment}",
        "++hydra.callbacks.sweep_report._target_=src.launch.report_hook.SweepReport", *overrides,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


# --- a real tiny sweep (python -m src.train -m), made once per session by conftest's fixture ----

EXPERIMENT = "tiny_sweep"
# Adam moves every weight by ~lr on its first step: at 1e6, the un-normalized residual stream
# overflows float32 on the second forward pass.
DIVERGING = ["norm=no_norm", "optim.lr=1e6", "optim.warmup_fraction=0", "seed=0,1"]


@dataclass
class TinySweep:
    uri: str
    report_dir: Path
    outputs: list[str]  # stdout + stderr of each multirun
    returncodes: list[int]


def _multirun(root: Path, cache: Path, name: str, *overrides: str) -> tuple[int, str]:
    proc = run_cli(
        "src.train",
        "-m",
        *TINY_MODEL,
        "optim.max_steps=5",
        "val_every_n_steps=5",
        f"experiment_name={EXPERIMENT}",
        f"paths.cache_dir={cache}",
        f"paths.mlflow_db={root / 'mlflow.db'}",
        f"paths.mlflow_artifacts={root / 'mlartifacts'}",
        f"hydra.sweep.dir={root / name}",
        f"paths.reports_dir={root / 'reports'}",
        "++hydra.callbacks.sweep_report._target_=src.launch.report_hook.SweepReport",
        f"++hydra.callbacks.sweep_report.out_dir={root / 'report'}",
        *overrides,
    )
    return proc.returncode, proc.stdout + proc.stderr


def seeded_store(root: Path, template: Path) -> Path:
    """root/mlflow.db, a copy of the session's migrated store (conftest's `store_template`): the sweeps
    that write there skip MLflow's schema migrations (5-10 s a fresh file on two loaded cores), which
    only the tests of a store's creation need to run."""
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(template, root / "mlflow.db"))


def build_tiny_sweep(root: Path, cache: Path, template: Path) -> TinySweep:
    """2 norms x 2 seeds, then a multirun of two diverging no_norm jobs, in one experiment (its store
    seeded from `template`)."""
    seeded_store(root, template)
    results = [
        # ...ending with the variants' steps interleaved (2 rounds): the speed the report gives.
        _multirun(root, cache, "normal", "norm=hand_layernorm,torch_layernorm", "seed=0,1", "report.speed_rounds=2",
                  "report.speed_kernel_s=1", "report.share_rounds=0"),  # the share rounds: tests/test_claims_file.py
        _multirun(root, cache, "diverging", *DIVERGING),
    ]
    return TinySweep(
        f"sqlite:///{root / 'mlflow.db'}", root / "report", [out for _, out in results], [rc for rc, _ in results]
    )


def checkpointed(overrides: list[str], tmp_path: Path, steps: int) -> list[str]:
    """A tiny run of `steps` steps that checkpoints every 3 into tmp_path/ckpt (the resume tests')."""
    return [
        *overrides,
        f"optim.max_steps={steps}",
        "optim.lr=3e-3",
        "checkpoint.enabled=true",
        "checkpoint.every_n_steps=3",
        f"checkpoint.dir={tmp_path / 'ckpt'}",
    ]


def first_checkpoint(proc: subprocess.Popen, root: Path, timeout_s: float = 300) -> Path:
    """The first `last.ckpt` under root/checkpoints, once the running job `proc` has written it; fails
    the test when the job ends or the time runs out first."""
    deadline = time.monotonic() + timeout_s
    while not (found := next((root / "checkpoints").rglob("last.ckpt"), None)):
        assert proc.poll() is None and time.monotonic() < deadline, "the job ended before its first checkpoint"
        time.sleep(0.05)
    return found


@contextlib.contextmanager
def tmpfs(folder: Path, options: str, why: str) -> Iterator[Path]:
    """A tmpfs mounted on `folder` (a read-only or a small disk) for the block; the test is skipped,
    saying `why` it needs one, where mounting is not allowed (not root)."""
    import pytest

    folder.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"{why} (mount: {mounted.stderr.decode().strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def training_runs(client: Any, experiment: str) -> list:
    """The training runs of an experiment (its sweep's parent run left out); the experiment must exist."""
    from src.tracking.tags import SWEEP_TAG

    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r}"
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(SWEEP_TAG) != "true"]


def claims_at_once(stores: list[Any], experiment_id: str, fp: str) -> list[tuple[Any, str]]:
    """Each store's `claim` on config `fp`, all started at the same instant (one thread each, behind
    a barrier): (the held claim or None, why not), in the order they returned."""
    from src.tracking.sweep import take_lock

    barrier, results = threading.Barrier(len(stores)), []

    def one(store: Any) -> None:
        barrier.wait()
        results.append(take_lock(store, experiment_id, fp, stale_after_s=300))

    threads = [threading.Thread(target=one, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def unwrapped(text: str) -> str:
    """Terminal output with each wrapped line joined back into one (src.core.terminal): a line
    indented at least HANG deeper than the line that began it continues that line; so does a
    table cell's wrapped part. For tests that read a sentence or a row whole."""
    from src.core.terminal import HANG

    out: list[str] = []
    start = 0  # the indentation of the line being continued
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if out and out[-1].strip() and line.strip() and indent >= start + HANG:
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
            continue
        out.append(line)
        start = indent
    return "\n".join(out)
