"""Every failure ends in one line: before the run is recorded, a `config error:` naming the field (and
nothing recorded); after it, what happened to the store or checkpoint and how to continue. The
traceback goes to the job's log file, never to the terminal."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from helpers import REPO, cli_env, run_cli, run_train, tmpfs, unwrapped
from mlflow.tracking import MlflowClient

import src.training.run_life as run_life_module
from src.core.paths import ConfigError, compose
from src.tracking.store import Store
from src.tracking.store_uri import StoreError, has_credentials, redact_text, redact_uri, refuse_credentials
from src.train import train
from src.training.failures import RunFailed


def _lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


# --- before anything is recorded: one `config error:` line, naming the field ------------------------

CASES = {
    # A sweep of zero jobs: Hydra launched none, recorded an empty FINISHED sweep run and exited 0.
    "empty_sweep": (["-m", "norm=glob(zzz*)"], "config error: norm=glob(zzz*): the sweep has no jobs"),
    # 643 GB of logits: the allocator's error after 112 lines, a FAILED run left behind.
    "huge_micro_batch": (["optim.micro_batch_size=100000"], "config error: optim.micro_batch_size=100000: "),
    # Built a 13 GB model for ~50 s before the data check refused it.
    "huge_context": (["model.context_length=100000000"], "config error: seq_len=100000000 (= model.context_length)"),
    # Hydra's refusal of a value the schema types (src/core/schema.py): four lines, the key on the third.
    "wrong_type": (["seed=abc"], "config error: seed: 'abc' is not an integer"),
    # 51 lines, two tracebacks, nothing naming the field.
    "unknown_scheme": (["logger.tracking_uri=foo://bar/baz"], "config error: logger.tracking_uri=foo://bar/baz: "),
    # Hydra's own output folder: a FileNotFoundError traceback from its mkdir.
    "run_dir": (["hydra.run.dir=/proc/normsweep"], "config error: hydra.run.dir: /proc is not writable"),
    "sweep_dir": (["-m", "seed=0,1", "hydra.sweep.dir=/proc/normsweep"], "config error: hydra.sweep.dir: /proc is not writable"),
    # The launcher's node given a launcher's name: a sweep run recorded, then Hydra's
    # "Input config does not have a `_target_` field", naming nothing.
    "launcher_name": (["-m", "hydra.launcher=joblib"], "config error: hydra.launcher=joblib: hydra.launcher is the config that a hydra/launcher option sets"),
    # Hydra's own hint for `norm=a,b` without -m: trained no_norm alone, both options merged.
    "group_list": (["norm=[hand_rmsnorm,no_norm]"], "config error: norm=[hand_rmsnorm,no_norm]: a list of norm options merges them"),
    # Hydra's lexer error, a caret on a second line, and a link to version 1.2's grammar.
    "non_ascii": (["experiment_name=ñörm"], "config error: experiment_name=ñörm: 'ñ' is not allowed in an unquoted value; quote the value: experiment_name='ñörm'"),
}


@pytest.mark.fresh_store  # asserts that no store file is written
@pytest.mark.slow  # two cases a CLI process
@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_one_line_before_anything_is_recorded(
    case: str, tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    args, start = CASES[case]
    flags = [a for a in args if a.startswith("-")]
    command = [*flags, *tiny_overrides, *[a for a in args if not a.startswith("-")]]
    # In this process through the entry point (helpers.run_train); two as a user's command, each a
    # process of its own: the exit status and the one line are the process's.
    proc = run_cli("src.train", *command, timeout=300) if case in ("wrong_type", "empty_sweep") else run_train(*command)
    lines = _lines(proc)
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0].startswith(start), lines[-20:]
    assert not Path(store["db"]).exists()  # nothing recorded, not even a store
    if case == "unknown_scheme":
        assert "sqlite://" in lines[0] and "http://" in lines[0]  # the supported schemes
    if case == "huge_context":
        assert "GiB" in lines[0]  # refused by size, before the model was built
    if case == "non_ascii":  # the grammar of the Hydra installed
        import hydra

        assert f"hydra.cc/docs/{'.'.join(hydra.__version__.split('.')[:2])}/advanced/override_grammar" in lines[0]
    if case == "empty_sweep":
        assert not (tmp_path / "multirun").exists()  # Hydra wrote nothing


@pytest.mark.fresh_store  # asserts that no store file is written
def test_unwritable_checkpoint_folder_is_refused_before_recording(
    tiny_overrides: list[str], store: dict[str, str], read_only_dir: Path
) -> None:
    # Found at the first checkpoint write before: a traceback and a FAILED run. The entry point in this
    # process (helpers.run_train): the refusal is the point, not the process.
    folder = read_only_dir / "ckpt"
    proc = run_train(*tiny_overrides, "checkpoint.enabled=true", f"checkpoint.dir={folder}")
    lines = _lines(proc)
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("config error: checkpoint.dir: "), lines[-20:]
    assert str(read_only_dir) in lines[0] and "not writable" in lines[0]
    assert not Path(store["db"]).exists()


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:9/?token=SECRET",
        "https://mlflow.example.com/api?x=1&access_token=SECRET",
        "postgresql://db:5432/mlflow?password=SECRET",
        "http://h:5000/?api_key=SECRET",
        "http://h:5000/?client-secret=SECRET#frag",
        "http://h:5000/?X-Auth=SECRET",  # printed in the clear: on no list of secret names
        "http://h:5000/?a=1&My_API_Key=SECRET",
        "https://h/mlflow?sv=2024&Signature=SECRET",
    ],
)
def test_query_credentials_are_refused_and_redacted(uri: str) -> None:
    # They were printed in the error line and written to .hydra/ by Hydra. The command line goes through
    # refuse_credentials before Hydra starts (test_store_faults.py runs that CLI path).
    assert has_credentials(uri) and "SECRET" not in redact_uri(uri)
    assert "SECRET" not in redact_text(f"python -m src.train -m logger.tracking_uri={uri} seed=0,1")
    with pytest.raises(SystemExit) as stopped:  # before Hydra writes the command line
        refuse_credentials([f"logger.tracking_uri={uri}"])
    assert "SECRET" not in str(stopped.value) and "MLFLOW_TRACKING_TOKEN" in str(stopped.value)
    with pytest.raises(StoreError) as err:  # from a config file
        Store.connect(uri)
    assert "SECRET" not in str(err.value)


def test_plain_query_parameters_are_kept() -> None:
    for uri in ("sqlite:////abs/mlflow.db?mode=rwc", "http://h:5000/?design=1&page=2", "http://h/?steps_seen=3"):
        assert not has_credentials(uri) and redact_uri(uri) == uri
    # A name holding a secret's part is masked even when it is plain: masking errs on the safe side.
    assert redact_uri("http://h/?tokens_seen=3") == "http://h/?tokens_seen=***"


@pytest.mark.fresh_store  # asserts that no store file is written
def test_data_fineweb_without_the_extra_names_it(tiny_overrides: list[str], store: dict[str, str]) -> None:
    # 38 lines and two tracebacks before; now refused like any other bad value, before recording.
    if importlib.util.find_spec("datasets") is not None:
        pytest.skip("the fineweb extra is installed here")
    with pytest.raises(ConfigError, match=r"^data=fineweb: .*pip install -e '\.\[fineweb\]'"):
        train(compose([*tiny_overrides, "data=fineweb"]))
    assert not Path(store["db"]).exists()


# --- the UI on a port already taken -------------------------------------------------------------


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.slow  # a CLI process
def test_ui_on_a_taken_port_fails_in_one_line(taken_port: int, store: dict[str, str]) -> None:
    # Printed links to the other server's port, then uvicorn's error, and exited 0.
    proc = run_cli("src.ui", "--port", str(taken_port), f"paths.mlflow_db={store['db']}", timeout=120)
    lines = _lines(proc)
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0].startswith(f"error: logger.ui.port={taken_port}: "), lines
    assert "http://" not in lines[0]  # no links


# --- after the run is recorded: the store breaks under it ---------------------------------------


@pytest.fixture
def small_store_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs for the store (root only: elsewhere the test is skipped)."""
    with tmpfs(tmp_path / "store_disk", "size=8m", "a small disk needs a tmpfs mount (root)") as folder:
        yield folder


def _fault_run(point: str, overrides: list[str], db: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """tests/fault_job.py: the store fails after step 6 of 8 (checkpoints every 3 steps)."""
    args = [*overrides, f"paths.mlflow_db={db}", "optim.max_steps=8", "checkpoint.enabled=true",
            "checkpoint.every_n_steps=3", f"checkpoint.dir={tmp_path / 'ckpt'}"]  # fmt: skip
    command = [sys.executable, str(REPO / "tests" / "fault_job.py"), point, *args]
    return subprocess.run(command, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a real training run in a subprocess
@pytest.mark.parametrize("point", ["store_full", "store_gone"])
def test_store_failing_mid_run_ends_in_one_line(
    point: str, tiny_overrides: list[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Before: 13 tracebacks (MLflow logs each failed statement), no summary line.
    folder = request.getfixturevalue("small_store_disk") if point == "store_full" else tmp_path / "store"
    db = folder / "mlflow.db"
    proc = _fault_run(point, tiny_overrides, db, tmp_path)
    lines = _lines(proc)
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("error: "), lines[-30:]
    line = lines[0]
    if point == "store_full":
        assert "the MLflow store's disk is full" in line and f"free space on {folder}" in line and "resume=true" in line
    else:
        assert f"the MLflow store file {db} disappeared" in line and "restore the file" in line
        # starting over in a new store: a single run's checkpoint would refuse the re-run as it stands
        assert f"(a single run: after removing {tmp_path / 'ckpt' / 'last.ckpt'})" in line
    assert str(tmp_path / "ckpt" / "last.ckpt") in line  # where it continues from
    log = tmp_path / "outputs" / "train.log"
    assert f"(traceback: {log})" in line and "Traceback (most recent call last)" in log.read_text()


class _OutOfMemoryAtStep2(L.Callback):
    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


@pytest.mark.slow  # a real (tiny) fit
def test_allocator_error_after_recording_is_one_line_and_a_failed_run(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class WithFault(run_life_module.RunCallbacks):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.extra.append(_OutOfMemoryAtStep2())

    monkeypatch.setattr(run_life_module, "RunCallbacks", WithFault)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(RunFailed) as err:
        train(compose([*tiny_overrides, "checkpoint.enabled=true", "checkpoint.every_n_steps=1", f"checkpoint.dir={ckpt}"]))
    line = str(err.value)
    assert "\n" not in line and "out of memory" in line and "optim.micro_batch_size" in line
    assert f"continue from {ckpt / 'last.ckpt'}" in line and isinstance(err.value.__cause__, torch.OutOfMemoryError)
    client = MlflowClient(store["uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("normsweep").experiment_id])
    assert run.info.status == "FAILED" and f"run {run.info.run_id} closed FAILED" in line


# `python -m src.train` itself, with an allocator error at step 2 of the sweep's job #0 only.
_OOM_IN_JOB_0 = """
import runpy, sys
import lightning as L, torch
from hydra.core.hydra_config import HydraConfig
import src.training.run_life as run_life

class OutOfMemoryInJob0(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 2 and HydraConfig.get().job.num == 0:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

class WithFault(run_life.RunCallbacks):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.extra.append(OutOfMemoryInJob0())

run_life.RunCallbacks = WithFault
sys.argv = ["src.train", *sys.argv[1:]]
runpy.run_module("src.train", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow  # a two-job sweep in a subprocess
def test_a_failed_sweep_job_is_said_as_it_fails_and_once_at_the_end(tiny_overrides: list[str]) -> None:
    """The other jobs still run; the sweep ends with the failure's line, last, and Hydra's own
    `Error executing job with overrides: [...]` (every override of the job) is not printed."""
    command = [sys.executable, "-c", _OOM_IN_JOB_0, "-m", "seed=0,1", *tiny_overrides]
    proc = subprocess.run(command, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = [line for line in unwrapped(proc.stderr).splitlines() if "out of memory" in line]
    assert len(said) == 2 and said[0] == f"[normsweep] {said[1]}", said
    assert said[1].startswith("error: torch_layernorm-s0: out of memory") and unwrapped(proc.stderr).strip().splitlines()[-1] == said[1]
    assert "Error executing job" not in proc.stderr, proc.stderr[-3000:]
    assert "torch_layernorm-s1 ok" in proc.stdout  # job #1 trained after job #0 failed
