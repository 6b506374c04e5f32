"""Two copies of one sweep on one store: the copy that is not the last to end writes no report and
leaves the shared sweep run to the last one; a job's lines name its run by its variant."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import claims_at_once, unwrapped
from omegaconf import OmegaConf

from src.core.paths import compose
from src.launch import sweep_end
from src.launch.callbacks import MlflowSetup
from src.launch.report_hook import SweepReport
from src.tracking import sweep
from src.tracking.identity import flatten, identity_config
from src.tracking.store import Store
from src.tracking.tags import PARENT_TAG, PID_TAG, SWEEP_TAG
from src.tracking.variants import AXES_ENV, axes_to_env, find_variants
from src.training.run_spec import resolve


@pytest.fixture
def other_copy() -> Iterator[int]:
    """The pid of a live process standing for the other copy's job (what a job's liveness tags
    carry); not a child of this one, which a pool worker of this copy would be."""
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    yield pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_a_copy_that_is_not_the_last_writes_no_report_and_leaves_the_sweep_run(
    migrated_store: dict[str, str], other_copy: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the copy that finished first wrote a partial report (`0/1 ... running at step 5`),
    logged `sweep/<variant>.n_seeds=0` into the shared sweep run and closed it FAILED incomplete."""
    store = Store.connect(migrated_store["uri"])
    experiment_id = store.experiment_id("two_copies", migrated_store["artifacts"])
    parent = store.create_run(experiment_id, "sweep-two_copies", {SWEEP_TAG: "true"})
    job = store.create_run(experiment_id, "hand_layernorm · post-s0", {PARENT_TAG: parent, **sweep.liveness_tags()})
    store.set_tags(job, {PID_TAG: str(other_copy)})  # trained by the other copy, still alive
    config = OmegaConf.create({"logger": {"enabled": True}, "experiment_name": "two_copies"})
    sweep_end.open_parent(store, parent, stale_after_s=300)
    try:
        SweepReport().on_multirun_end(config)
        MlflowSetup().on_multirun_end(config)
    finally:
        sweep_end.disarm()
    out = unwrapped(capsys.readouterr().out)
    assert "report: not written by this copy: another copy of the sweep still trains 1 of its jobs (hand_layernorm · post-s0)" in out
    run = store.get_run(parent)
    assert run is not None and run.info.status == "RUNNING"  # left to the last copy
    assert not any(key.startswith("sweep/") for key in run.data.metrics)  # no n_seeds=0
    assert not (tmp_path / "reports").exists()

    # The other copy's job ended (its process is gone): this copy is now the last one.
    os.kill(other_copy, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while sweep.pid_alive(other_copy) and time.monotonic() < deadline:  # reaped by init
        time.sleep(0.05)
    sweep_end.open_parent(store, parent, stale_after_s=300)
    try:
        assert sweep_end.still_running_elsewhere() == []
    finally:
        sweep_end.disarm()


def test_a_jobs_lines_name_its_run_by_its_variant(tiny_overrides: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a norm × placement sweep's skip warnings said `hand_layernorm-s0` for both placements."""
    jobs = [[*tiny_overrides, "norm=hand_layernorm", f"model.norm_placement={p}"] for p in ("pre", "post")]
    jobs += [[*tiny_overrides, "norm=torch_layernorm", f"model.norm_placement={p}"] for p in ("pre", "post")]
    configs = [compose(overrides) for overrides in jobs]
    variants = find_variants({str(i): flatten(identity_config(cfg)) for i, cfg in enumerate(configs)})
    monkeypatch.setenv(AXES_ENV, axes_to_env(variants.axes))
    names = [resolve(cfg).shown_name for cfg in configs]
    assert names[:2] == ["hand_layernorm · pre-s0", "hand_layernorm · post-s0"], names
    monkeypatch.delenv(AXES_ENV)  # a single run, or a sweep of the norm alone: its run_name
    assert resolve(configs[1]).shown_name == "hand_layernorm-s0"


@pytest.mark.slow
def test_a_sigterm_line_names_the_job_as_its_run(tiny_overrides: list[str], store: dict[str, str], tmp_path: Path) -> None:
    """In a learning-rate sweep the line read `torch_layernorm-s0 stopped by SIGTERM` while the MLflow run
    and the job's other lines said `lr=0.001-s0`: every line of a job uses its run's name."""
    import sys

    from helpers import REPO, cli_env
    from mlflow.tracking import MlflowClient

    args = [sys.executable, "-m", "src.train", "-m", *tiny_overrides, "norm=torch_layernorm", "optim.lr=0.001,0.002",
            "optim.max_steps=5000", "val_every_n_steps=5000", "log_every_n_steps=1", "experiment_name=lr_named",
            f"hydra.sweep.dir={tmp_path / 'multirun'}"]  # fmt: skip
    client = MlflowClient(store["uri"])
    proc = subprocess.Popen(args, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # until the first job is inside its fit
            assert proc.poll() is None and time.monotonic() < deadline, "the job never reached its fit"
            exp = client.get_experiment_by_name("lr_named") if Path(store["db"]).exists() else None
            runs = [r for r in client.search_runs([exp.experiment_id]) if SWEEP_TAG not in r.data.tags] if exp else []
            if runs and len(client.get_metric_history(runs[0].info.run_id, "train/train_loss")) >= 2:
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out = unwrapped(proc.communicate(timeout=180)[0])
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = runs
    said = [line for line in out.splitlines() if "stopped by SIGTERM:" in line]
    assert said and said[0].startswith(f"[normsweep] {run.info.run_name} stopped by SIGTERM"), out[-3000:]
    assert run.info.run_name == "lr=0.001-s0", run.info.run_name



def _slowed(request: Callable[..., object]) -> Callable[..., object]:
    def slow(*args: object) -> object:
        time.sleep(0.1)  # a loaded server: every request takes longer than the back-offs differ
        return request(*args)

    return slow


def test_two_copies_claiming_a_config_at_once_on_a_slow_store_leave_it_to_one(
    migrated_store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: both copies withdrew their claims and tried again after a random back-off; a store
    slower to answer than the back-offs differ saw the two claims together every time, and after 8
    tries both copies skipped the config ("claimed by another copy of the sweep 8 times in a row"):
    each exited 0 and the config was never trained. Now the first in line keeps its claim and wins."""
    stores = [Store.connect(migrated_store["uri"]) for _ in range(2)]
    experiment_id = stores[0].experiment_id("claims", migrated_store["artifacts"])
    for name in ("experiment_tags", "set_experiment_tag", "delete_experiment_tag"):
        monkeypatch.setattr(Store, name, _slowed(getattr(Store, name)))
    monkeypatch.setattr(sweep, "CLAIM_BACKOFF_S", (0.01, 0.05))  # back-offs at most 0.04 s apart
    for round_ in range(3):
        results = claims_at_once(stores, experiment_id, f"fp{round_}")
        winners = [c for c, _ in results if c is not None]
        assert len(winners) == 1, results
        assert [why for c, why in results if c is None][0].startswith("opened by"), results
        winners[0].release()
    assert not [k for k in stores[0].experiment_tags(experiment_id) if k.startswith(sweep.CLAIM_PREFIX)]


def test_where_the_time_went_counts_only_this_commands_jobs(
    migrated_store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a copy that trained 2 jobs (12.3 + 4.0 s) said `46 s in all: training 32 s`, the
    sum of all four runs of the shared sweep run, the other copy's included."""
    from src.core.cli import COMMAND_ENV
    from src.launch.time_split import COMMAND_STARTED_ENV, sweep_time_line
    from src.tracking.tags import COMMAND_TAG

    store = Store.connect(migrated_store["uri"])
    experiment_id = store.experiment_id("time_split", migrated_store["artifacts"])
    parent = store.create_run(experiment_id, "sweep-time_split", {SWEEP_TAG: "true"})
    for seed, (command, seconds) in enumerate((("me", 12.3), ("other", 10.0), ("me", 4.0), ("other", 6.0))):
        run = store.create_run(experiment_id, f"torch_layernorm-s{seed}", {PARENT_TAG: parent, COMMAND_TAG: command})
        store.log_metrics(run, {"train_time_s": seconds})
        store.terminate(run, "FINISHED")
    monkeypatch.setenv(COMMAND_STARTED_ENV, f"{time.time() - 46:.3f}")
    monkeypatch.setenv(COMMAND_ENV, "me")
    line = sweep_time_line(store, experiment_id, parent, 0.0)
    assert line is not None and "46 s in all: training 16 s (35%)" in line, line


@pytest.mark.slow  # two real copies of one sweep on one store
def test_two_real_copies_each_count_their_own_training(token_cache_dir: Path, tmp_path: Path, store_template: Path) -> None:
    """Two `python -m src.train -m` of one 4-seed sweep on one store, started together: each trains the
    jobs the other has not claimed, and a copy that says where its time went counts those it trained,
    and no other."""
    import re
    import shutil
    import sys

    from helpers import FAST, REPO, cli_env

    shutil.copyfile(store_template, tmp_path / "mlflow.db")
    args = [
        sys.executable, "-m", "src.train", "-m", *FAST, "optim.max_steps=12", "experiment_name=two_copies_time",
        f"paths.cache_dir={token_cache_dir}", f"paths.mlflow_db={tmp_path / 'mlflow.db'}",
        f"paths.mlflow_artifacts={tmp_path / 'mlartifacts'}", f"paths.reports_dir={tmp_path / 'reports'}",
        f"paths.checkpoints_dir={tmp_path / 'checkpoints'}", "seed=0,1,2,3",
    ]  # fmt: skip

    def start(name: str) -> subprocess.Popen[str]:
        with open(tmp_path / f"{name}.out", "w") as out:  # a file each: neither waits on a full pipe
            return subprocess.Popen(
                [*args, f"hydra.sweep.dir={tmp_path / name}"], cwd=REPO, env=cli_env(), stdout=out,
                stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip

    first, second = start("a"), start("b")  # at once: each claims the configs the other has not
    first.wait(timeout=900)
    second.wait(timeout=900)
    out_a, out_b = (tmp_path / "a.out").read_text(), (tmp_path / "b.out").read_text()
    assert first.returncode == 0 and second.returncode == 0, (out_a[-2000:], out_b[-2000:])
    trained = {"a": re.findall(r" ok \| train ([\d.]+) s \|", out_a), "b": re.findall(r" ok \| train ([\d.]+) s \|", out_b)}
    assert len(trained["a"]) + len(trained["b"]) == 4, (out_a[-2000:], out_b[-2000:])
    assert trained["a"] and trained["b"], trained  # each trained some: the other's jobs were there to miscount
    said = 0
    for name, out in (("a", out_a), ("b", out_b)):
        found = re.search(r"where the time went: [\d,]+ s in all: training (?:at most )?([\d,]+) s", out)
        if found:
            said += 1
            own = sum(float(s) for s in trained[name])
            assert abs(float(found.group(1).replace(",", "")) - own) <= 1.0, (name, found.group(0), trained)
    assert said >= 1, (out_a[-2000:], out_b[-2000:])
    print({k: v for k, v in trained.items()})
