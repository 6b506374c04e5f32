"""The metrics a dead tracking server never acknowledged (src/tracking/unsent.py): kept on disk beside
the checkpoint, sent to their run at their own time, and never thrown away: a file cut short gives up
what it still holds and is kept under another name, a run another store (or MLflow's Delete) cannot
take keeps them beside its replaced checkpoint. Each said in one line.

The first tests read and write the file against a real SQLite store; the slow ones make the state a
killed `mlflow server` leaves (a sweep job stopped mid-run, its unsent file beside its checkpoint)
once, and start each case from a copy of it through `python -m src.train`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import TINY_MODEL, cli_env, first_checkpoint, train_entry, training_runs, unwrapped
from mlflow.tracking import MlflowClient

from src.core.ports import free_port
from src.tracking import unsent
from src.tracking.store import Store
from src.tracking.tags import MISSING_STEPS_TAG
from src.tracking.team_server import TeamServer
from src.tracking.unsent import UNREADABLE_SUFFIX, UNSENT_FILE

# --- the file itself, against a real store ----------------------------------------------------------


@pytest.fixture
def run_store(migrated_store: dict[str, str]) -> tuple[Store, str]:
    store = Store.connect(migrated_store["uri"])
    experiment = store.experiment_id("unsent", migrated_store["artifacts"])
    return store, store.create_run(experiment, "torch_layernorm-s0", {})


def test_kept_records_round_trip_with_their_own_time(tmp_path: Path) -> None:
    path = tmp_path / UNSENT_FILE
    unsent.keep(path, "r1", [(3, 1_000, {"train/train_loss": 5.0}), (4, 2_000, {"train/train_loss": 4.5})])
    unsent.keep(path, "r1", [(4, 3_000, {"train/lr": 0.1})])  # a later write of step 4 adds to it
    found = unsent.read(path)
    assert found.whole
    assert found.runs == {
        "r1": [
            {"step": 3, "timestamp": 1_000, "metrics": {"train/train_loss": 5.0}},
            {"step": 4, "timestamp": 3_000, "metrics": {"train/train_loss": 4.5, "train/lr": 0.1}},
        ]
    }


def test_resent_metrics_keep_the_time_they_were_made(tmp_path: Path, run_store: tuple[Store, str]) -> None:
    store, run_id = run_store
    path = tmp_path / UNSENT_FILE
    made = int(time.time() * 1000) - 3_600_000  # an hour before the resend
    unsent.keep(path, run_id, [(1, made, {"train/train_loss": 5.0}), (2, made + 500, {"train/train_loss": 4.0})])
    store.log_metrics(run_id, {"train/train_loss": 5.0}, step=1)  # step 1 landed after all: not doubled
    sent = unsent.send(store, path)
    assert sent.values == 1 and sent.notes == [] and not path.exists()
    history = {m.step: m.timestamp for m in store.metric_history(run_id, "train/train_loss")}
    assert sorted(history) == [1, 2] and history[2] == made + 500


def test_a_file_cut_short_gives_up_what_it_holds_and_is_kept(tmp_path: Path, run_store: tuple[Store, str]) -> None:
    store, run_id = run_store
    path = tmp_path / UNSENT_FILE
    unsent.keep(path, run_id, [(s, 1_000 * s, {"train/train_loss": 10.0 - s, "train/lr": 0.01}) for s in range(1, 9)])
    whole = path.read_bytes()
    cut = whole[: len(whole) * 5 // 8]  # mid-record
    path.write_bytes(cut)
    found = unsent.read(path)
    assert not found.whole and 0 < len(found.runs[run_id]) < 8
    readable = [r["step"] for r in found.runs[run_id]]
    assert readable == list(range(1, len(readable) + 1))  # each record before the cut, none after

    sent = unsent.send(store, path)
    assert sent.values == 2 * len(readable)
    kept = path.with_name(UNSENT_FILE + UNREADABLE_SUFFIX)
    assert not path.exists() and kept.read_bytes() == cut  # the damaged file, as it was
    (note,) = sent.notes
    assert str(kept) in note and f"{len(readable)} step(s)" in note
    assert sorted(m.step for m in store.metric_history(run_id, "train/train_loss")) == readable


def test_an_unreadable_file_is_never_written_over(tmp_path: Path) -> None:
    path = tmp_path / UNSENT_FILE
    path.write_text('{"r1": [{"step": 1, "metrics": {"a": 1.0}}, {"st')
    unsent.keep(path, "r1", [(2, None, {"a": 2.0})])
    assert [r["step"] for r in unsent.read(path).runs["r1"]] == [1, 2]  # the readable record carried over
    assert path.with_name(UNSENT_FILE + UNREADABLE_SUFFIX).read_text().endswith('{"st')
    path.write_text("not json")
    unsent.keep(path, "r1", [(3, None, {"a": 3.0})])
    assert path.with_name(f"{UNSENT_FILE}{UNREADABLE_SUFFIX}.2").read_text() == "not json"  # the first one kept too


def test_a_run_the_store_cannot_take_keeps_its_metrics_beside_its_checkpoint(
    tmp_path: Path, run_store: tuple[Store, str]
) -> None:
    store, run_id = run_store
    path = tmp_path / UNSENT_FILE
    unsent.keep(path, "not-in-this-store", [(1, 1_000, {"a": 1.0})])
    unsent.keep(path, run_id, [(1, 1_000, {"a": 1.0})])
    store.client.delete_run(run_id)
    sent = unsent.send(store, path)
    assert sent.values == 0 and not path.exists()
    for gone, why in (("not-in-this-store", "is not in"), (run_id, "was deleted in MLflow")):
        aside = unsent.kept_for(tmp_path, gone)
        assert unsent.read(aside).runs == {gone: [{"step": 1, "timestamp": 1_000, "metrics": {"a": 1.0}}]}
        assert any(str(aside) in n and why in n for n in sent.notes), sent.notes


# --- the state a killed server leaves, through the real entry point ---------------------------------

STEPS = 60
EVERY = 5  # steps between checkpoints
EXPERIMENT = "unsent"


class SqliteServer(TeamServer):
    """`mlflow server` on a SQLite file: the team server's process handling, without PostgreSQL."""

    @property
    def backend_uri(self) -> str:
        return f"sqlite:///{self.state_dir / 'mlflow.db'}"


def _args(root: Path, cache: Path, store: str) -> list[str]:
    """The sweep job's command line; `store`: logger.tracking_uri=... or paths.mlflow_db=..."""
    return [
        *TINY_MODEL, f"experiment_name={EXPERIMENT}", store, f"logger.artifact_location={root / 'artifacts'}",
        "logger.system_metrics_s=0", f"paths.cache_dir={cache}", f"paths.checkpoints_dir={root / 'checkpoints'}",
        f"paths.reports_dir={root / 'reports'}", f"hydra.sweep.dir={root / 'multirun'}", f"hydra.run.dir={root / 'run'}",
        "norm=torch_layernorm", "seed=0", f"optim.max_steps={STEPS}", f"val_every_n_steps={STEPS}", "optim.lr=3e-3",
        "checkpoint.enabled=true", f"checkpoint.every_n_steps={EVERY}",
    ]  # fmt: skip


def _launch(root: Path, *args: str, short_restart_wait: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *train_entry(short_restart_wait), *args], cwd=root, env=cli_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = _launch(root, *args)
    out, _ = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(args, proc.returncode, out, "")


@dataclass
class Killed:
    """A copy of the state a server killed mid-run left: its server (not started), the job's root and
    command, the stopped run, its checkpoint folder and the unsent file's bytes."""

    server: SqliteServer
    root: Path
    args: list[str]
    run_id: str
    folder: Path
    unsent_bytes: bytes

    @property
    def unsent(self) -> Path:
        return self.folder / UNSENT_FILE

    def steps(self, run_id: str | None = None, key: str = "train/train_loss") -> Counter[int]:
        client = MlflowClient(self.server.uri)
        return Counter(m.step for m in client.get_metric_history(run_id or self.run_id, key))


@pytest.fixture(scope="module")
def killed_once(
    tmp_path_factory: pytest.TempPathFactory, token_cache_dir: Path, store_template: Path
) -> Iterator[tuple[Path, Killed]]:
    """A sweep job whose `mlflow server` was SIGKILLed after its first checkpoint: made once, kept as
    a snapshot that each test copies back into place (`killed` below). The server's SQLite file starts
    as a copy of the session's migrated store: the server skips MLflow's migrations (seconds)."""
    root = tmp_path_factory.mktemp("killed")
    server = SqliteServer(root / "server", free_port(), free_port())
    server.state_dir.mkdir(parents=True)
    shutil.copyfile(store_template, server.state_dir / "mlflow.db")
    assert server.backend_uri == f"sqlite:///{server.state_dir / 'mlflow.db'}"  # the file the server opens
    args = ["-m", *_args(root, token_cache_dir, f"logger.tracking_uri={server.uri}")]
    server.start_mlflow()
    try:
        proc = _launch(root, *args, short_restart_wait=True)
        first_checkpoint(proc, root)  # step 5
        server.kill_mlflow()
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode != 0 and "stopped answering" in out, out[-3000:]
    finally:
        server.kill_mlflow()
    folder = next((root / "checkpoints").rglob("last.ckpt")).parent
    assert (folder / UNSENT_FILE).is_file(), "the killed server left no unsent metrics"
    ((run_id, records),) = unsent.read(folder / UNSENT_FILE).runs.items()
    print(f"unsent: steps {[r['step'] for r in records]}")
    snapshot = tmp_path_factory.mktemp("killed_snapshot") / "root"
    shutil.copytree(root, snapshot)
    yield snapshot, Killed(server, root, args, run_id, folder, (folder / UNSENT_FILE).read_bytes())


@pytest.fixture
def killed(killed_once: tuple[Path, Killed]) -> Iterator[Killed]:
    """The killed state, fresh for this test, its server started again on its database."""
    snapshot, state = killed_once
    shutil.rmtree(state.root)
    shutil.copytree(snapshot, state.root)
    state.server.start_mlflow()
    try:
        yield state
    finally:
        state.server.kill_mlflow()


@pytest.mark.slow  # a real server, a killed sweep job, then the re-run
def test_a_cut_unsent_file_is_sent_as_far_as_it_reads_and_kept(killed: Killed) -> None:
    cut = killed.unsent_bytes[: max(1, len(killed.unsent_bytes) * 2 // 3)]
    killed.unsent.write_bytes(cut)
    readable = {r["step"] for r in unsent.read(killed.unsent).runs.get(killed.run_id, [])}
    held = {r["step"] for r in json.loads(killed.unsent_bytes)[killed.run_id]}

    proc = _run(killed.root, *killed.args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    kept = killed.unsent.with_name(UNSENT_FILE + UNREADABLE_SUFFIX)
    said = [line for line in unwrapped(proc.stdout).splitlines() if "cut short" in line]
    assert len(said) == 1 and str(kept) in said[0], proc.stdout[-3000:]
    assert kept.read_bytes() == cut and not killed.unsent.exists()

    # Every step once; the only ones missing are those that were in the part cut off, kept on disk.
    steps = killed.steps()
    assert set(steps.values()) == {1}, steps
    missing = set(range(1, STEPS + 1)) - set(steps)
    assert missing <= held - readable, (sorted(missing), sorted(held), sorted(readable))
    run = MlflowClient(killed.server.uri).get_run(killed.run_id)
    assert run.info.status == "FINISHED"
    # ...and the gap is carried: the run ended FINISHED with steps missing and nothing on it said so.
    assert missing, "the cut removed no step the resumed run did not train again: nothing to carry"
    gap = unsent.step_ranges(sorted(missing))
    assert run.data.tags.get(MISSING_STEPS_TAG) == gap, proc.stdout[-3000:]
    lines = [line for line in unwrapped(proc.stdout).splitlines() if "misses step(s)" in line]
    assert len(lines) == 1 and f"its loss curve misses step(s) {gap} for good" in lines[0], proc.stdout[-3000:]


@pytest.mark.slow  # a real server, a killed sweep job, then the re-run against another store
def test_a_sweep_against_another_store_keeps_the_unsent_metrics_beside_the_replaced_checkpoint(
    killed: Killed,
) -> None:
    other = killed.root / "other" / "mlflow.db"
    args = [a for a in killed.args if not a.startswith("logger.tracking_uri=")] + [f"paths.mlflow_db={other}"]
    proc = _run(killed.root, *args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    replaced = killed.folder / "replaced"
    kept = unsent.kept_for(killed.folder, killed.run_id)
    said = [line for line in unwrapped(proc.stdout).splitlines() if "kept as" in line]
    assert len(said) == 1 and str(replaced / f"{killed.run_id}.ckpt") in said[0] and str(kept) in said[0], said
    assert kept.read_bytes() == killed.unsent_bytes  # every step the old server never acknowledged, on disk

    # Back on its own store, with its checkpoint and unsent metrics put back, the old run ends whole.
    shutil.move(replaced / f"{killed.run_id}.ckpt", killed.folder / "last.ckpt")
    shutil.move(kept, killed.unsent)
    proc = _run(killed.root, *killed.args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    steps = killed.steps()
    assert sorted(steps) == list(range(1, STEPS + 1)) and set(steps.values()) == {1}, steps


@pytest.mark.slow  # a real server, a killed sweep job, `mlflow runs delete`, then re-runs
def test_a_run_deleted_in_mlflow_says_so_and_the_two_ways_on(killed: Killed) -> None:
    env = {**cli_env(), "MLFLOW_TRACKING_URI": killed.server.uri}
    subprocess.run([sys.executable, "-m", "mlflow", "runs", "delete", "--run-id", killed.run_id], env=env, check=True)

    # The single run refuses, in one line, before it trains: restore the run, or start over.
    single = _run(killed.root, *killed.args[1:])
    assert single.returncode == 2, single.stdout[-3000:]
    lines = [line for line in single.stdout.splitlines() if "deleted in MLflow" in line]
    assert len(lines) == 1 and lines[0].startswith("config error:"), single.stdout[-3000:]
    assert f"mlflow runs restore --run-id {killed.run_id}" in lines[0] and f"remove {killed.folder / 'last.ckpt'}" in lines[0]
    assert "Traceback" not in single.stdout and killed.unsent.read_bytes() == killed.unsent_bytes

    # A sweep starts over (it must finish), saying so once; the old run's checkpoint and metrics kept.
    proc = _run(killed.root, *killed.args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [line for line in unwrapped(proc.stdout).splitlines() if "deleted in MLflow" in line]
    assert len(lines) == 1 and f"mlflow runs restore --run-id {killed.run_id}" in lines[0], proc.stdout[-3000:]
    assert (killed.folder / "replaced" / f"{killed.run_id}.ckpt").is_file()
    assert unsent.kept_for(killed.folder, killed.run_id).read_bytes() == killed.unsent_bytes
    client = MlflowClient(killed.server.uri)
    (run,) = training_runs(client, EXPERIMENT)
    assert run.info.run_id != killed.run_id and run.info.status == "FINISHED"
    sweeps = [r for r in client.search_runs([run.info.experiment_id]) if r.info.run_id != run.info.run_id]
    assert sweeps and all(r.info.status != "FAILED" for r in sweeps), [r.info.status for r in sweeps]


@pytest.mark.slow  # a real server, a killed sweep job, `mlflow runs delete` and `restore`, then the re-run
def test_a_deleted_run_restored_is_continued_whole(killed: Killed) -> None:
    env = {**cli_env(), "MLFLOW_TRACKING_URI": killed.server.uri}
    for verb in ("delete", "restore"):  # the first way on the refusal names
        subprocess.run([sys.executable, "-m", "mlflow", "runs", verb, "--run-id", killed.run_id], env=env, check=True)
    proc = _run(killed.root, *killed.args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    run = MlflowClient(killed.server.uri).get_run(killed.run_id)
    assert run.info.status == "FINISHED"
    steps = killed.steps()
    assert sorted(steps) == list(range(1, STEPS + 1)) and set(steps.values()) == {1}, steps
