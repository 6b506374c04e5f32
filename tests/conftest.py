"""Shared fixtures: one token cache per test session and tiny-run overrides for real training."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, TinySweep, build_tiny_sweep, tmpfs
from mlflow.tracking import MlflowClient

from src.tracking.store import Store
from src.tracking.team_marker import MARKERS_ENV
from src.tracking.team_server import ServerSetupError, TeamServer, pg_tool


def cores_per_worker(cores: int, workers: int) -> int | None:
    """The threads each of `workers` pytest-xdist workers (and every process it starts) gets: its share
    of the cores. Torch on every core in each worker spins against the other: on this project's 2-core
    machine two small GPT-2 trainings side by side made 0.58 + 0.64 steps/s with torch's default
    threads and 1.13 + 1.10 with one thread each (`python scripts/side_by_side.py`). None outside
    xdist: a plain run keeps torch's default."""
    return max(1, cores // workers) if workers > 1 else None


_threads = cores_per_worker(len(os.sched_getaffinity(0)), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")))
if _threads is not None and "OMP_NUM_THREADS" not in os.environ:  # a user's own setting is kept
    os.environ["OMP_NUM_THREADS"] = str(_threads)  # the CLIs, sweeps and servers the tests start
    torch.set_num_threads(_threads)
# The team servers the tests start record their addresses (src.tracking.team_marker) in this run's own
# folder: a server of the user's on a port a test once used is not taken for a team server later.
if MARKERS_ENV not in os.environ:
    os.environ[MARKERS_ENV] = tempfile.mkdtemp(prefix="normsweep-test-team-markers-")
    atexit.register(shutil.rmtree, os.environ[MARKERS_ENV], ignore_errors=True)  # after the servers' teardown


@pytest.fixture(autouse=True)
def environment_restored() -> Iterator[None]:
    """Each test leaves its worker's environment as it found it. Code a test runs in-process sets
    variables for the processes it starts (MLflow's HTTP bounds, a reached server's marker, a sweep's
    parent run and axes, a checked user norm): left behind, they would reach every process the worker
    starts later, and a later test would meet an earlier sweep's state. Fixtures of a wider scope are
    set up before this one, so what they set stays."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def token_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data cache for the whole session: the corpus is tokenized once, then reused."""
    return tmp_path_factory.mktemp("token_cache")


@pytest.fixture
def store(tmp_path: Path) -> dict[str, str]:
    """A fresh MLflow store (SQLite + artifact folder) for one test."""
    return {
        "db": str(tmp_path / "mlflow.db"),
        "uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "artifacts": str(tmp_path / "mlartifacts"),
    }


@pytest.fixture(scope="session")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite file whose schema is made once per session: MLflow's migrations take seconds
    for every fresh file (over ten under load), a copy of a migrated one milliseconds."""
    db = tmp_path_factory.mktemp("store_template") / "mlflow.db"
    Store.connect(f"sqlite:///{db}").client  # noqa: B018 - the first open creates the schema
    return db


@pytest.fixture
def migrated_store(store: dict[str, str], store_template: Path) -> dict[str, str]:
    """`store` with MLflow's schema already in place (a copy of the session's template): for tests of
    what is written to a store, not of how a store is created."""
    shutil.copyfile(store_template, store["db"])
    return store


@pytest.fixture
def tiny_overrides(
    token_cache_dir: Path, store: dict[str, str], store_template: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> list[str]:
    """Overrides for a few-step run that writes only under tmp_path and the session cache. Its store
    has MLflow's schema in place (`migrated_store`: seconds saved per test), except in a test marked
    `fresh_store`, which checks that a refusal writes nothing, not even the store's file."""
    if request.node.get_closest_marker("fresh_store") is None:
        shutil.copyfile(store_template, store["db"])
    return [
        *TINY_MODEL,
        f"paths.cache_dir={token_cache_dir}",
        f"paths.mlflow_db={store['db']}",
        f"paths.mlflow_artifacts={store['artifacts']}",
        f"paths.checkpoints_dir={tmp_path / 'checkpoints'}",
        f"paths.reports_dir={tmp_path / 'reports'}",
        f"hydra.run.dir={tmp_path / 'outputs'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody can write to: chmod for a user; for root, a read-only tmpfs mounted there."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    with tmpfs(folder, "ro,size=1m", "root cannot be denied writes here") as ro:
        yield ro


@pytest.fixture(scope="session")
def team_server() -> Iterator[TeamServer]:
    """A real PostgreSQL cluster and a real `mlflow server` on it, on free ports of 127.0.0.1, for the
    session (src/tracking/team_server.py). Skipped where PostgreSQL or psycopg is missing, unless
    NORMSWEEP_REQUIRE_POSTGRES=1 (CI installs both)."""
    try:
        import psycopg  # noqa: F401

        for tool in ("initdb", "pg_ctl", "createdb"):
            pg_tool(tool)
    except (ImportError, ServerSetupError) as err:
        if os.environ.get("NORMSWEEP_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here: {err}")
        pytest.skip(f"no PostgreSQL for a team server: {err}")
    server = TeamServer.start(fast=True)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory, token_cache_dir: Path, store_template: Path) -> TinySweep:
    """Two real multiruns into one experiment (see helpers.build_tiny_sweep), shared by the session."""
    return build_tiny_sweep(tmp_path_factory.getbasetemp() / "tiny_sweep", token_cache_dir, store_template)


@pytest.fixture(scope="session")
def tiny_client(tiny_sweep: TinySweep) -> MlflowClient:
    return MlflowClient(tiny_sweep.uri)


# Fixtures that run real multiruns in subprocesses: a test that uses one is slow by definition, and
# one left unmarked would silently bring a sweep back into `make test-fast`.
SWEEP_FIXTURES = frozenset({"tiny_sweep", "tiny_client"})


# `make test` runs the suite on pytest-xdist workers (--dist loadgroup; three, TEST_WORKERS). What a session or module
# fixture builds (a team server, a local SLURM, the tiny sweeps, a module's trained runs) is built
# once per worker that needs it, so each file's tests stay on one worker, and files that share a
# costly session-wide engine share one worker: it is started once, as in a plain `pytest` run. The team
# server is not one of them (started in ~5 s): test_slurm.py and test_team_server.py, one group while they
# shared it, were the suite's longest (12 min 48 s beside load, 7 and 5 of it each), so they run on two
# workers, a team server each.
SHARED_ENGINES = {"local_slurm": "slurm", "tiny_sweep": "tiny_sweep", "tiny_client": "tiny_sweep"}


def worker_groups(items: list[pytest.Item]) -> dict[str, str]:
    """file -> its xdist group: the file itself, or the group of a shared engine any of its tests uses."""
    group = {item.path.name: item.path.name for item in items}
    for item in items:
        for fixture in SHARED_ENGINES.keys() & set(getattr(item, "fixturenames", ())):
            group[item.path.name] = SHARED_ENGINES[fixture]
    return group


def longest_first(items: list[pytest.Item], group: dict[str, str]) -> list[pytest.Item]:
    """The order in which the workers take the groups (`make test` keeps it: --no-loadscope-reorder):
    the shared engines' groups first (SLURM's file is the longest, minutes of waiting on real
    processes), then the groups with the most slow tests, the quick ones last, so
    that no worker is left alone with a long group at the end. pytest-xdist's own order is by number
    of tests, which put the quick files (hundreds of parametrized cases) first."""
    slow = Counter(group[item.path.name] for item in items if item.get_closest_marker("slow") is not None)
    shared = list(dict.fromkeys(SHARED_ENGINES.values()))

    def rank(item: pytest.Item) -> tuple[int, int]:
        name = group[item.path.name]
        return (shared.index(name), 0) if name in shared else (len(shared), -slow[name])

    return sorted(items, key=rank)  # stable: each file's tests keep their order


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own hook turns them into node ids)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    group = worker_groups(items)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group[item.path.name]))
    items[:] = longest_first(items, group)
    unmarked = [
        item.nodeid
        for item in items
        if SWEEP_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None
    ]
    if unmarked:
        raise pytest.UsageError(f"mark these @pytest.mark.slow (they run real sweeps): {unmarked}")
    unfound = alone_outside_their_files(items)
    if unfound:
        raise pytest.UsageError(f"mark these with `@pytest.mark.alone` written in their file (Makefile's ALONE_FILES greps for it): {unfound}")


def alone_outside_their_files(items: list[pytest.Item]) -> list[str]:
    """The tests marked `alone` whose file does not spell `pytest.mark.alone`: `make test` runs the alone
    part on the files that do (Makefile's ALONE_FILES), and would leave these out."""
    spelled: dict[Path, bool] = {}
    for item in items:
        if item.get_closest_marker("alone") is not None and item.path not in spelled:
            spelled[item.path] = ALONE_MARK in item.path.read_text()
    return [item.nodeid for item in items if spelled.get(item.path) is False and item.get_closest_marker("alone") is not None]


ALONE_MARK = "pytest.mark.alone"  # what Makefile's ALONE_FILES greps for
