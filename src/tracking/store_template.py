"""A new SQLite store starts as a copy of an empty one, made once per installed MLflow.

MLflow gives a new SQLite file its schema by running every alembic migration in turn, each committed
on its own: about 1 s of CPU on the dev VM, and several seconds when the disk is shared, paid by every
new store (a sweep into a fresh `paths.mlflow_db`, each test's store). The schema it ends with depends
only on the installed MLflow, so the first new store of a machine makes an empty one once
(`<cache>/normsweep/mlflow-stores/`, the user's cache folder, `$XDG_CACHE_HOME` or `~/.cache`) with
MLflow's own `_initialize_tables`, and each later new store is a copy of it, made in milliseconds.

The copy holds the schema alone: the Default experiment, whose artifact location is the store's own,
is created by MLflow when it opens the copy, as it is in a store it migrated. MLflow checks every store
it opens against the schema its code expects (`_verify_schema`): a copy that did not match would be
refused, and src.tracking.store then rebuilds it, holding no data, by MLflow's migrations. Anything
that stops the copy (no cache folder, a private MLflow function gone) leaves MLflow to migrate the
new file as before. Called under the store's lock (src.tracking.store.store_lock).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

from src.core.atomic_io import atomic_write

log = logging.getLogger(__name__)

CACHE_ENV = "XDG_CACHE_HOME"


def template_folder() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "normsweep" / "mlflow-stores"


def _schema_key(db_utils: Any) -> str:
    """The installed MLflow's version and its migrations' file names: the schema a new store gets."""
    versions = Path(db_utils.__file__).parent.parent / "db_migrations" / "versions"
    names = sorted(p.name for p in versions.glob("*.py"))
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    return f"{version('mlflow')}-{digest}"


def _made_template() -> Path:
    """The empty store of this MLflow, made now if it is not there yet (by MLflow's own migrations)."""
    import mlflow.store.db.utils as db_utils

    template = template_folder() / f"empty-{_schema_key(db_utils)}.db"
    if template.is_file():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    scratch = template.with_name(f".{template.name}.{os.getpid()}.new")  # SQLite writes it in place
    try:
        engine = db_utils.create_sqlalchemy_engine(f"sqlite:///{scratch}")
        try:
            db_utils._initialize_tables(engine)  # what MLflow runs on a new file: every migration
        finally:
            engine.dispose()
        atomic_write(template, scratch.read_bytes())  # whole or absent: a process beside this one may make it too
    finally:
        with contextlib.suppress(OSError):
            scratch.unlink()
    return template


def seed_new_store(db: Path) -> bool:
    """Make `db`, which does not exist, a copy of the empty store; False when MLflow must make it."""
    try:
        atomic_write(db, _made_template().read_bytes())  # ~1 MB
        return True
    except Exception as err:  # noqa: BLE001 - any reason at all: MLflow's migrations make the store as before
        log.debug("a new store without the template (%s: %s)", type(err).__name__, err)
        return False
