"""Faults around the MLflow store: simultaneous first opens, a half-migrated store, no server, no write access."""

from __future__ import annotations

import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import run_cli, run_train
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from src.tracking.retry import with_retry
from src.tracking.store import EXPERIMENT_TAGS, Store, lock_path
from src.tracking.store_uri import FIELD, StoreError, redact_uri

RACE_ROUNDS = 1  # three real trainings at once on a new file: without the lock 11 of 15 crashed (docs)
RACE_JOBS = 3


def _tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _finished_runs(uri: str, experiment: str) -> list[str]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)
    return sorted(r.info.status for r in runs)


@pytest.mark.slow
def test_simultaneous_first_runs_on_a_fresh_store(tiny_overrides: list[str], tmp_path: Path) -> None:
    """Three trainings start at the same instant on a new SQLite file, five times over: no run lost."""
    for round_ in range(RACE_ROUNDS):
        db = tmp_path / f"round{round_}" / "mlflow.db"
        uri = f"sqlite:///{db}"
        jobs = [
            [
                *tiny_overrides,
                f"paths.mlflow_db={db}",
                f"seed={k}",
                "experiment_name=race",
                f"hydra.run.dir={tmp_path / f'round{round_}' / f'outputs{k}'}",
            ]
            for k in range(RACE_JOBS)
        ]
        # Threads only start the processes; each job is a separate `python -m src.train`.
        with ThreadPoolExecutor(RACE_JOBS) as pool:
            procs = list(pool.map(lambda args: run_cli("src.train", *args), jobs))
        for proc in procs:
            assert proc.returncode == 0, f"round {round_}: {proc.stderr[-3000:]}"
        assert not [t for t in _tables(db) if t.startswith("_alembic_tmp_")]
        assert _finished_runs(uri, "race") == ["FINISHED"] * RACE_JOBS, f"round {round_}"
        assert lock_path(db).exists()


def _half_migrated_store(db: Path) -> None:
    """A store as a crash in the middle of MLflow's migration `39d1c3be5f05` leaves it.

    That migration rebuilds `latest_metrics` through alembic's `_alembic_tmp_latest_metrics`; a
    process that dies between creating the copy and swapping it in leaves both tables behind.
    """
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config, create_sqlalchemy_engine
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    engine = create_sqlalchemy_engine(f"sqlite:///{db}")
    try:
        InitialBase.metadata.create_all(engine)
        with engine.begin() as connection:
            config = _get_alembic_config(str(engine.url))
            config.attributes["connection"] = connection
            command.upgrade(config, "a8c4a736bde6")
    finally:
        engine.dispose()
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE _alembic_tmp_latest_metrics AS SELECT * FROM latest_metrics")


def test_half_migrated_empty_store_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    _half_migrated_store(db)
    with pytest.raises(Exception, match="_alembic_tmp_latest_metrics"):
        MlflowClient(uri).search_experiments()  # MLflow alone cannot open it, now or ever

    experiment_id = Store.connect(uri).experiment_id("after_repair", str(tmp_path / "artifacts"))

    assert "rebuilt" in caplog.text and "_alembic_tmp_latest_metrics" in caplog.text
    assert not [t for t in _tables(db) if t.startswith("_alembic_tmp_")]
    client = MlflowClient(uri)
    run = client.create_run(experiment_id)
    client.set_terminated(run.info.run_id)
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_half_migrated_store_with_data_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    _half_migrated_store(db)
    with sqlite3.connect(db) as con:
        con.execute(
            "INSERT INTO experiments (name, artifact_location, lifecycle_stage) VALUES ('mine', '/a', 'active')"
        )
    before = db.read_bytes()

    with pytest.raises(StoreError) as err:
        Store.connect(f"sqlite:///{db}")

    message = str(err.value)
    assert FIELD in message and str(db) in message and "half-migrated" in message
    assert "_alembic_tmp_latest_metrics" in message and "mlflow db upgrade" in message
    assert db.read_bytes() == before  # untouched


def test_new_experiment_is_tagged_as_model_training(migrated_store: dict[str, str]) -> None:
    uri = migrated_store["uri"]
    experiment_id = Store.connect(uri).experiment_id("kind", None)
    assert Store.connect(uri).experiment_id("kind", None) == experiment_id  # found, not created twice
    tags = MlflowClient(uri).get_experiment(experiment_id).tags
    assert tags.items() >= EXPERIMENT_TAGS.items()


def _assert_refused_before_training(proc: subprocess.CompletedProcess[str], cache: Path) -> str:
    assert proc.returncode != 0
    assert "config error" in proc.stderr and FIELD in proc.stderr, proc.stderr[-3000:]
    assert "[normsweep]" not in proc.stdout  # no run summary
    assert not cache.exists() or not any(cache.iterdir())  # the data was not even prepared
    return proc.stderr


def test_unreachable_server_fails_fast_naming_the_field(tiny_overrides: list[str], tmp_path: Path) -> None:
    cache = tmp_path / "fresh_cache"
    # The entry point in this process (helpers.run_train): the refusal is the point, not the process.
    # MLflow's own client would retry for minutes.
    proc = run_train(*tiny_overrides, f"paths.cache_dir={cache}", "logger.tracking_uri=http://127.0.0.1:9")
    stderr = _assert_refused_before_training(proc, cache)
    assert "http://127.0.0.1:9" in stderr and "no MLflow tracking server answers" in stderr


def test_read_only_folder_fails_fast_naming_the_field(
    tiny_overrides: list[str], tmp_path: Path, read_only_dir: Path
) -> None:
    cache = tmp_path / "fresh_cache"
    db = read_only_dir / "mlflow.db"
    proc = run_train(*tiny_overrides, f"paths.cache_dir={cache}", f"paths.mlflow_db={db}")  # the entry point, in this process
    stderr = _assert_refused_before_training(proc, cache)
    assert str(read_only_dir) in stderr and "not writable" in stderr


def test_redact_uri() -> None:
    assert redact_uri("http://alice:s3cret@mlflow.example.com:5000/prefix") == "http://mlflow.example.com:5000/prefix"
    assert redact_uri("https://token@host/x?y=1") == "https://host/x?y=1"
    assert redact_uri("postgresql://u:p%40ss@db:5432/mlflow") == "postgresql://db:5432/mlflow"
    for plain in ("http://127.0.0.1:5000", "sqlite:////abs/mlflow.db", "databricks"):
        assert redact_uri(plain) == plain


def test_store_errors_never_show_the_password() -> None:
    with pytest.raises(StoreError) as err:
        Store.connect("http://alice:s3cret@127.0.0.1:9")
    assert "s3cret" not in str(err.value) and "alice" not in str(err.value)
    assert f"{FIELD}=http://127.0.0.1:9" in str(err.value) and "MLFLOW_TRACKING_PASSWORD" in str(err.value)


def test_retries_ride_out_sqlite_write_lock_and_nothing_else(tmp_path: Path) -> None:
    """`with_retry` tries again while another connection holds SQLite's write lock (a real one),
    gives up after its attempts, and raises any other error at once."""
    db = tmp_path / "locked.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    writer = sqlite3.connect(db, timeout=0, isolation_level=None)  # no busy wait of SQLite's own
    tries: list[int] = []

    def write() -> str:
        tries.append(1)
        if len(tries) == 3:
            holder.execute("COMMIT")  # the other writer is done
        writer.execute("INSERT INTO t VALUES (1)")
        return "written"

    assert with_retry(write, delay_s=0.001) == "written" and len(tries) == 3
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        with_retry(lambda: writer.execute("INSERT INTO t VALUES (2)"), attempts=3, delay_s=0.001)
    holder.execute("COMMIT")

    def broken() -> None:
        tries.append(1)
        raise ValueError("not a lock")

    tries.clear()
    with pytest.raises(ValueError, match="not a lock"):
        with_retry(broken, delay_s=0.001)
    assert len(tries) == 1

    # Another process inserted the same row between MLflow's check and its insert (two runs logging
    # one dataset at once): the next try finds it.
    writer.execute("CREATE TABLE datasets (name UNIQUE)")

    def insert_unless_there() -> str:
        tries.append(1)
        if len(tries) == 1:  # the other process's insert lands after this one's check
            holder.execute("INSERT INTO datasets VALUES ('shakespeare')")
            writer.execute("INSERT INTO datasets VALUES ('shakespeare')")
        return "linked"

    tries.clear()
    assert with_retry(insert_unless_there, delay_s=0.001) == "linked" and len(tries) == 2
    holder.close()
    writer.close()
