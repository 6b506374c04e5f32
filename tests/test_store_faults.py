"""Store-side faults that must fail in the first seconds, with one line, and never leak a secret:
a database path that is a folder, an unreachable server under a multirun, credentials in the URI."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import run_cli, run_train
from mlflow.tracking import MlflowClient

from src.core.paths import ConfigError, compose
from src.core.ports import free_port
from src.tracking.store import Store
from src.tracking.store_uri import CREDENTIAL_ENV, StoreError
from src.tracking.team_server import SERVER_ENV
from src.train import train

SECRET = "Sup3r-s3cret-pw"  # the password under test: it must appear nowhere
SERVER_START_S = 300  # a guard against a hang only: the auth server migrates two fresh databases


def _files_containing(root: Path, needle: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            found.append(str(path.relative_to(root)))
    return found


def test_store_path_that_is_a_directory_is_refused_naming_it(tiny_overrides: list[str], tmp_path: Path) -> None:
    folder = tmp_path / "not_a_db"
    folder.mkdir()
    cache = tmp_path / "fresh_cache"
    cfg = compose([*tiny_overrides, f"paths.mlflow_db={folder}", f"paths.cache_dir={cache}"])
    with pytest.raises(StoreError) as err:
        train(cfg)
    message = str(err.value)
    assert "paths.mlflow_db" in message and "is a directory" in message and str(folder) in message
    assert "\n" not in message and "mlflow db upgrade" not in message
    assert not cache.exists()  # refused before any data was prepared
    assert list(folder.iterdir()) == []  # and nothing was written into the folder


def test_multirun_with_unreachable_server_stops_in_the_sweep_callback(tiny_overrides: list[str], tmp_path: Path) -> None:
    # The entry point in this process (the sweep callback's refusal is the point, not the process); the
    # callback used to retry for more than 200 s.
    proc = run_train("-m", *tiny_overrides, "seed=0,1", "logger.tracking_uri=http://127.0.0.1:9")
    assert proc.returncode != 0
    assert "no MLflow tracking server answers" in proc.stderr and "logger.tracking_uri=http://127.0.0.1:9" in proc.stderr
    assert "Launching 2 jobs" not in proc.stdout + proc.stderr  # stopped before Hydra launched any job
    assert not (tmp_path / "multirun" / "0").exists()


@pytest.mark.slow  # a CLI process
def test_credentials_in_the_tracking_uri_are_refused_before_hydra_writes(tiny_overrides: list[str], tmp_path: Path) -> None:
    # A multirun: Hydra would write the secret into multirun.yaml and every job's .hydra/ (a single
    # run's .hydra/ goes through the same check, before Hydra starts).
    uri = f"http://alice:{SECRET}@127.0.0.1:9"
    proc = run_cli("src.train", "-m", "seed=0,1", *tiny_overrides, f"logger.tracking_uri={uri}", timeout=150)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("config error: logger.tracking_uri=http://127.0.0.1:9")
    assert all(name in lines[0] for name in CREDENTIAL_ENV)
    assert SECRET not in proc.stdout + proc.stderr and "alice" not in proc.stdout + proc.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()  # Hydra wrote nothing
    assert _files_containing(tmp_path, SECRET) == []


def test_credentials_in_a_config_file_are_refused_too() -> None:
    # Not from the command line (a YAML, an environment interpolation): the store check refuses them.
    with pytest.raises(ConfigError) as err:
        Store.connect(f"https://bob:{SECRET}@mlflow.example.com")
    assert SECRET not in str(err.value) and "MLFLOW_TRACKING_TOKEN" in str(err.value)


# --- a real MLflow server with basic auth, credentials through the environment ---------------------


@dataclass
class AuthServer:
    uri: str
    root: Path  # its backend store, auth database and artifacts


def _wait_healthy(uri: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"mlflow server did not answer within {SERVER_START_S} s: {log.read_text()[-2000:]}")


@pytest.fixture
def auth_server(tmp_path_factory: pytest.TempPathFactory, store_template: Path) -> Iterator[AuthServer]:
    """`mlflow server --app-name basic-auth` on 127.0.0.1, admin password SECRET (needs Flask-WTF)."""
    pytest.importorskip("flask_wtf", reason="mlflow's basic-auth app needs Flask-WTF (pip install mlflow[auth])")
    root = tmp_path_factory.mktemp("server")
    # Its backend store a copy of the session's migrated one: a fresh file costs MLflow's migrations at
    # the server's start (seconds); what is checked here is the credentials' path, not a store's creation.
    shutil.copyfile(store_template, root / "backend.db")
    # The server's own config is the one file that holds the password on purpose: kept out of `root`.
    ini = tmp_path_factory.mktemp("server_config") / "auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{root / 'auth.db'}\nadmin_username = admin\nadmin_password = {SECRET}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # A checked password kept for a minute: MLflow's default (0) hashes it again (scrypt, ~75 ms of
        # CPU) for each of the run's hundreds of requests, half a minute of the test on two cores. A
        # wrong or missing one is still refused: only a password that passed is kept.
        "auth_cache_ttl_seconds = 60\n"
    )
    port = free_port()
    # Its job runner off, as on a team server (SERVER_ENV): eight more processes that this test never uses.
    env = {**os.environ, **SERVER_ENV, "MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_FLASK_SERVER_SECRET_KEY": "test-only-key"}
    log = root / "server.log"
    mlflow = Path(sys.executable).parent / "mlflow"
    command = [str(mlflow), "server", "--app-name", "basic-auth", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'backend.db'}",
               "--artifacts-destination", str(root / "artifacts")]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        uri = f"http://127.0.0.1:{port}"
        _wait_healthy(uri, proc, log)
        yield AuthServer(uri, root)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # a throw-away server: no graceful shutdown needed
        proc.wait(timeout=60)


@pytest.mark.slow  # a real server and a subprocess sweep
def test_basic_auth_server_through_env_credentials_leaks_nothing(
    auth_server: AuthServer, tiny_overrides: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CREDENTIAL_ENV[0], raising=False)
    monkeypatch.delenv(CREDENTIAL_ENV[1], raising=False)
    with pytest.raises(StoreError, match="refused the credentials"):  # the server does demand them
        Store.connect(auth_server.uri)

    monkeypatch.setenv(CREDENTIAL_ENV[0], "admin")
    monkeypatch.setenv(CREDENTIAL_ENV[1], SECRET)
    proc = run_cli(
        "src.train", "-m", *tiny_overrides, "seed=0", "experiment_name=auth_sweep",
        f"logger.tracking_uri={auth_server.uri}", timeout=600,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]

    store = Store.connect(auth_server.uri)
    experiment = store.find_experiment("auth_sweep")
    assert experiment is not None
    runs = store.runs(experiment.experiment_id)
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]  # the job and its sweep run
    assert "report/report.md" in [a.path for a in store.client.list_artifacts(
        next(r.info.run_id for r in runs if "norm" not in r.data.tags), "report")]  # fmt: skip

    assert SECRET not in output
    # The server's store and artifacts, the multirun folder, the reports: every file this run touched.
    assert _files_containing(auth_server.root, SECRET) == []
    assert (tmp_path / "multirun").is_dir() and (tmp_path / "reports").is_dir()
    assert _files_containing(tmp_path, SECRET) == []


def test_reading_a_store_not_created_yet_creates_nothing(tmp_path: Path) -> None:
    """Every read a check or a refusal makes of a SQLite store whose file does not exist finds nothing
    and leaves no file: a refused command created a fresh 954 KB mlflow.db by looking up a run."""
    db = tmp_path / "new" / "mlflow.db"
    store = Store.connect(f"sqlite:///{db}")
    assert store.get_run("0" * 32) is None and store.find_experiment("normsweep") is None
    assert store.experiments() == [] and store.experiment_names() == []
    assert store.runs("0") == [] and store.runs_tagged("0", "norm", "x") == [] and store.metric_history("0" * 32, "k") == []
    assert not db.exists() and not db.parent.exists()
    store.experiment_id("made", None)  # the first write creates it
    assert db.is_file() and store.find_experiment("made") is not None


@pytest.mark.slow  # a tiny fit in process, one in a CLI process
def test_after_its_store_is_lost_a_runs_checkpoint_is_refused_without_a_store_and_the_advice_works(
    tiny_overrides: list[str], store: dict[str, str], tmp_path: Path
) -> None:
    """The store file deleted after a run checkpointed: the identical command was refused with advice
    that fails (`resume=true continues it`: refused too) and created a new store file while refusing."""
    ckpt = tmp_path / "ckpt"
    args = [*tiny_overrides, "checkpoint.enabled=true", "checkpoint.every_n_steps=2", f"checkpoint.dir={ckpt}"]
    train(compose(args))
    client = MlflowClient(store["uri"])
    run_id = client.search_runs([client.get_experiment_by_name("normsweep").experiment_id])[0].info.run_id
    db = Path(store["db"])
    db.unlink()  # the store is lost; the checkpoint of its run is left
    with pytest.raises(ConfigError) as refused:  # the identical command
        train(compose(args))
    line = str(refused.value)
    assert line.startswith(f"checkpoint.dir: {ckpt / 'last.ckpt'} holds the checkpoint of run {run_id}, which is not in")
    assert "resume=true continues it" not in line and "remove the file" in line
    assert not db.exists()
    with pytest.raises(ConfigError, match=rf"belongs to MLflow run {run_id}, which is not in .*: restore the store"):
        train(compose([*args, "resume=true"]))  # resume=true cannot continue it either, and says so
    assert not db.exists()
    (ckpt / "last.ckpt").unlink()  # as the line advises; then the identical command, in a process of its
    # own as after a real loss (this one's MLflow keeps a connection to the deleted file's inode)
    proc = run_cli("src.train", *args, timeout=300)
    assert proc.returncode == 0 and db.is_file(), proc.stderr[-3000:]
    client = MlflowClient(store["uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("normsweep").experiment_id])
    assert run.info.status == "FINISHED"
