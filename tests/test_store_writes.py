"""What the store costs a sweep: a new store is a copy of an empty one, not MLflow's migrations run
again (src/tracking/store_template.py), and a run's tags are one write, not one a tag."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow.store.db.utils as db_utils
import pytest
import sqlalchemy

from src.tracking.store import Store


def _schema(db: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """The store's tables and indexes by name, and its schema revision."""
    with sqlite3.connect(db) as con:
        names = sorted(con.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall())
        revision = [row[0] for row in con.execute("SELECT version_num FROM alembic_version")]
    return names, revision


def _opened(db: Path) -> Store:
    store = Store.connect(f"sqlite:///{db}")
    store.experiment_id("e", str(db.parent / "artifacts"))  # the first write creates the store
    return store


@pytest.mark.slow  # MLflow's migrations, twice (~1 s each on the quiet 2-core VM)
def test_a_new_store_is_a_copy_of_an_empty_one_made_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every new store ran MLflow's migrations (~1 s of CPU, seconds on a shared disk): a
    sweep into a fresh store paid them before its first job."""
    migrations = []
    initialize = db_utils._initialize_tables
    monkeypatch.setattr(db_utils, "_initialize_tables", lambda engine: migrations.append(engine.url) or initialize(engine))

    # No cache folder to keep the empty store in: MLflow makes the store itself, as it always did.
    (tmp_path / "not_a_folder").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not_a_folder"))
    _opened(tmp_path / "own" / "mlflow.db")
    assert len(migrations) == 1

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the user's cache folder
    for name in ("first", "second", "third"):
        _opened(tmp_path / name / "mlflow.db")
    assert len(migrations) == 2, migrations  # the empty store, made once; each new store a copy of it
    kept = tmp_path / "cache" / "normsweep" / "mlflow-stores"
    assert Path(str(migrations[1].database)).parent == kept  # made there, then renamed whole
    assert [p.suffix for p in kept.iterdir()] == [".db"]

    # What a copy holds is what MLflow's migrations make, and MLflow opens it as its own.
    assert _schema(tmp_path / "third" / "mlflow.db") == _schema(tmp_path / "own" / "mlflow.db")
    store = Store.connect(f"sqlite:///{tmp_path / 'third' / 'mlflow.db'}")
    assert store.find_experiment("e") is not None
    assert store.find_experiment("Default") is not None  # MLflow's own, created as it opened the copy


def test_a_runs_tags_are_written_at_once(migrated_store: dict[str, str]) -> None:
    """Before: each tag was its own `set_tag`, its own SQLite commit: ten tags, ten commits."""
    store = Store.connect(migrated_store["uri"])
    run_id = store.create_run(store.experiment_id("e", migrated_store["artifacts"]), "r", {})
    commits: list[int] = []

    def count(connection: object) -> None:
        commits.append(1)

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "commit", count)  # every SQLAlchemy engine's commits
    try:
        store.set_tags(run_id, {"one": "1"})
        one = len(commits)
        store.set_tags(run_id, {f"k{i}": str(i) for i in range(10)})
        ten = len(commits) - one
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "commit", count)
    assert ten == one, (one, ten)
    run = store.get_run(run_id)
    assert run is not None and {f"k{i}": str(i) for i in range(10)}.items() <= run.data.tags.items()



def test_mlflows_usage_telemetry_is_off_unless_the_user_turns_it_on() -> None:
    """A fresh process with a user's bare environment (no test's or CI's variables: MLflow turns its
    telemetry off under those by itself) that imports the package, then MLflow, has no telemetry
    client; a user's own MLFLOW_DISABLE_TELEMETRY is kept as they set it."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    bare = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHONWARNINGS": "ignore"}
    show = "import os, src; print(os.environ.get('MLFLOW_DISABLE_TELEMETRY'))"
    client = "; from mlflow.telemetry import get_telemetry_client; print(get_telemetry_client())"
    off = subprocess.run([sys.executable, "-c", show + client], cwd=REPO, env=bare, capture_output=True, text=True, timeout=120)
    assert off.returncode == 0 and off.stdout.split() == ["true", "None"], off.stdout + off.stderr[-2000:]
    # Turned on by the user: kept (MLflow itself is not imported here, which would send it).
    on = subprocess.run([sys.executable, "-c", show], cwd=REPO, env={**bare, "MLFLOW_DISABLE_TELEMETRY": "false"},
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert on.returncode == 0 and on.stdout.split() == ["false"], on.stdout + on.stderr[-2000:]
