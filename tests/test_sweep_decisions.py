"""What a re-run job does with the runs its config already has, on a real MLflow store."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.core.paths import ConfigError
from src.tracking.code import CodeState
from src.tracking.run_plan import decide_job, settle_lost, supersede
from src.tracking.store import Store
from src.tracking.sweep import (
    CODE_FINGERPRINT_TAG,
    FINGERPRINT_TAG,
    GIT_COMMIT_TAG,
    GIT_DIRTY_TAG,
    HEARTBEAT_TAG,
    HOST_TAG,
    PID_TAG,
    REQUIRED_FINAL_METRICS,
    SUPERSEDED_TAG,
    code_change_message,
    code_conflicts,
    runs_with_fingerprint,
)

FP = "0123456789abcdef"
STALE_S = 300.0


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory, store_template: Path) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("decisions")  # one store, one experiment per test
    shutil.copyfile(store_template, root / "mlflow.db")  # the schema made once per session
    return f"sqlite:///{root / 'mlflow.db'}", str(root / "mlartifacts")


@pytest.fixture
def client(shared_store: tuple[str, str], request: pytest.FixtureRequest) -> tuple[Store, str]:
    uri, artifacts = shared_store
    store = Store.connect(uri)
    return store, store.experiment_id(request.node.name, artifacts)


def _run(store: Store, exp: str, status: str, outcome: str, **tags: str) -> str:
    run_id = store.create_run(exp, "", {FINGERPRINT_TAG: FP, "outcome": outcome, "norm": "x", **tags})
    if outcome == "finished":  # a finished run holds its results (one without them is not skipped)
        store.log_metrics(run_id, dict.fromkeys(REQUIRED_FINAL_METRICS, 1.0))
    if status != "RUNNING":
        store.terminate(run_id, status)
    return run_id


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _decide(client: Store, exp: str, policy: str = "resume", has_checkpoint: bool = False):
    return decide_job(client, exp, FP, policy, STALE_S, lambda run: has_checkpoint)


def test_no_run_means_a_new_one(client) -> None:
    assert _decide(*client).action == "new"


@pytest.mark.parametrize(("status", "outcome"), [("FINISHED", "finished"), ("FAILED", "diverged")])
def test_a_result_is_skipped(client, status: str, outcome: str) -> None:
    c, exp = client
    run_id = _run(c, exp, status, outcome)
    d = _decide(c, exp)
    assert (d.action, d.run.info.run_id) == ("skip", run_id)


def test_a_failed_run_is_replaced_and_superseded(client) -> None:
    c, exp = client
    old = _run(c, exp, "FAILED", "failed")
    d = _decide(c, exp)
    assert d.action == "new" and d.supersede == [old]
    new = _run(c, exp, "FINISHED", "finished")
    supersede(c, d.supersede, new)
    assert c.get_run(old).data.tags[SUPERSEDED_TAG] == new
    assert [r.info.run_id for r in runs_with_fingerprint(c, exp, FP)] == [new]


@pytest.mark.parametrize("has_checkpoint", [True, False])
def test_preempted_resumes_from_its_checkpoint_or_restarts(client, has_checkpoint: bool) -> None:
    c, exp = client
    old = _run(c, exp, "KILLED", "preempted")
    d = _decide(c, exp, has_checkpoint=has_checkpoint)
    assert (d.action, d.run.info.run_id) == (("resume", old) if has_checkpoint else ("new", old))
    assert d.supersede == ([] if has_checkpoint else [old])


def test_running_with_a_dead_pid_on_this_host_is_lost(client) -> None:
    c, exp = client
    now = f"{time.time():.0f}"
    old = _run(c, exp, "RUNNING", "running", **{HOST_TAG: socket.gethostname(), PID_TAG: str(_dead_pid()), HEARTBEAT_TAG: now})
    d = _decide(c, exp, has_checkpoint=True)
    assert (d.action, d.run.info.run_id) == ("resume", old) and d.reason.startswith("lost;")
    assert c.get_run(old).info.status == "RUNNING"  # deciding changes no record: one route settles it
    assert settle_lost(c, exp, FP, STALE_S) == [old]
    run = c.get_run(old)
    assert run.info.status == "KILLED" and run.data.tags["outcome"] == "lost"


def test_running_elsewhere_fresh_is_left_alone_stale_is_lost(client) -> None:
    c, exp = client
    fresh = _run(c, exp, "RUNNING", "running", **{HOST_TAG: "other-node", PID_TAG: "1", HEARTBEAT_TAG: f"{time.time():.0f}"})
    d = _decide(c, exp)
    assert (d.action, d.run.info.run_id) == ("busy", fresh)
    assert c.get_run(fresh).info.status == "RUNNING"
    c.set_tags(fresh, {HEARTBEAT_TAG: f"{time.time() - STALE_S - 1:.0f}"})
    d = _decide(c, exp)
    assert d.action == "new" and d.supersede == [fresh] and c.get_run(fresh).info.status == "RUNNING"
    assert settle_lost(c, exp, FP, STALE_S) == [fresh] and c.get_run(fresh).data.tags["outcome"] == "lost"


def test_policies(client) -> None:
    c, exp = client
    done = _run(c, exp, "FINISHED", "finished")
    d = _decide(c, exp, policy="rerun")
    assert d.action == "new" and d.supersede == [done]
    with pytest.raises(ConfigError, match=r"sweep.on_existing=fail: run .* already has this config"):
        _decide(c, exp, policy="fail")


CODE = CodeState("c0de000000000000", {"src/model/gpt.py": "1"}, {"torch": "2.13.0"})


def _decide_code(client: Store, exp: str, on_code_change: str, has_checkpoint: bool = False):
    return decide_job(client, exp, FP, "resume", STALE_S, lambda run: has_checkpoint, CODE, on_code_change)


def test_a_result_of_other_code_follows_on_code_change(client) -> None:
    c, exp = client
    old = _run(c, exp, "FINISHED", "finished", **{CODE_FINGERPRINT_TAG: "0ther", GIT_COMMIT_TAG: "401e44dabc", GIT_DIRTY_TAG: "true"})
    with pytest.raises(ConfigError) as err:
        _decide_code(c, exp, "fail")
    assert str(err.value) == (
        "sweep.on_code_change=fail: 1 finished or resumable run of this sweep was made by other code: 1 at commit "
        "401e44d with uncommitted changes (no code manifest recorded); set sweep.on_code_change=rerun to train them "
        "again (the old runs stay, marked superseded) or =keep to reuse them (the report marks them); valid choices: "
        "fail, rerun, keep"
    )
    kept = _decide_code(c, exp, "keep")
    assert (kept.action, kept.run.info.run_id) == ("skip", old) and "kept (sweep.on_code_change=keep)" in kept.reason
    again = _decide_code(c, exp, "rerun")
    assert again.action == "new" and again.supersede == [old]
    assert c.get_run(old).data.tags["outcome"] == "finished"  # deciding changed nothing
    c.set_tags(old, {CODE_FINGERPRINT_TAG: CODE.fingerprint})
    assert _decide_code(c, exp, "fail").action == "skip"  # the same code: skipped as before


def test_runs_before_code_fingerprints_count_as_other_code(client) -> None:
    c, exp = client
    done = _run(c, exp, "FINISHED", "finished", **{GIT_COMMIT_TAG: "38b7e0f123"})  # no code fingerprint tag
    found = code_conflicts(c, exp, [FP, FP], CODE, STALE_S, lambda run: False)
    assert [r.info.run_id for r in found] == [done]
    assert "1 at commit 38b7e0f (recorded before code fingerprints, code unknown)" in code_change_message(c, found, CODE)
    cut = _run(c, exp, "KILLED", "preempted")  # now the latest: resumed only from a checkpoint of its own
    assert code_conflicts(c, exp, [FP], CODE, STALE_S, lambda run: False) == []  # a new run would train
    assert [r.info.run_id for r in code_conflicts(c, exp, [FP], CODE, STALE_S, lambda run: True)] == [cut]


def test_a_new_run_keeps_the_checkpoint_of_the_run_it_replaces(tmp_path: Path, store_template: Path) -> None:
    """A sweep job that trains a failed run again writes its own checkpoint; the failed run's moves aside."""
    import torch

    from src.core.paths import compose
    from src.tracking.identity import RUN_STATE_KEY
    from src.tracking.run_plan import plan_run
    from src.training.run_spec import resolve

    shutil.copyfile(store_template, tmp_path / "mlflow.db")
    spec = resolve(compose([
        "checkpoint.enabled=true", f"checkpoint.dir={tmp_path / 'ckpt'}", "experiment_name=replaced",
        f"paths.mlflow_db={tmp_path / 'mlflow.db'}", f"paths.mlflow_artifacts={tmp_path / 'mlartifacts'}",
    ]))  # fmt: skip
    store = Store.connect(spec.store.tracking_uri)
    exp = store.experiment_id(spec.store.experiment_name, spec.store.artifact_location)
    failed = _run(store, exp, "FAILED", "failed", **{FINGERPRINT_TAG: spec.identity.fingerprint})
    state = {"mlflow_run_id": failed, "fingerprint": spec.identity.fingerprint}
    spec.checkpoint.folder.mkdir(parents=True)
    torch.save({"state_dict": {"w": torch.ones(2)}, "callbacks": {RUN_STATE_KEY: state}}, spec.checkpoint.last)
    plan = plan_run(spec, True, store)
    assert plan.claim is not None
    plan.claim.release()
    kept = spec.checkpoint.folder / "replaced" / f"{failed}.ckpt"
    assert plan.ckpt_path is None and plan.supersede == [failed]  # a new run, from scratch
    assert plan.message.endswith(f"; its checkpoint kept as {kept}")
    assert not spec.checkpoint.last.exists()  # the new run's checkpoints write over nothing
    assert torch.load(kept, weights_only=True)["callbacks"][RUN_STATE_KEY] == state


@pytest.mark.parametrize("left_running", [False, True])
def test_a_sweep_job_reads_its_runs_once_unless_one_may_be_lost(
    left_running: bool, tmp_path: Path, store_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's job reads the runs of its config under its claim to decide; as its run opens it reads
    them again only where that read held a RUNNING run, which may be lost (before: every job read
    them twice, ~4 ms of CPU a job). A run left RUNNING by a dead process is still settled."""
    from src.core.paths import compose
    from src.tracking.run_plan import open_tracker, plan_run
    from src.training.run_spec import resolve

    shutil.copyfile(store_template, tmp_path / "mlflow.db")
    spec = resolve(compose([
        "experiment_name=searched", "logger.system_metrics_s=0", f"checkpoint.dir={tmp_path / 'ckpt'}",
        f"paths.mlflow_db={tmp_path / 'mlflow.db'}", f"paths.mlflow_artifacts={tmp_path / 'mlartifacts'}",
    ]))  # fmt: skip
    store = Store.connect(spec.store.tracking_uri)
    exp = store.experiment_id(spec.store.experiment_name, spec.store.artifact_location)
    fp = spec.identity.fingerprint
    lost = None
    if left_running:  # a run of this config whose process is gone (this host, a dead pid)
        lost = _run(store, exp, "RUNNING", "running", **{FINGERPRINT_TAG: fp, HOST_TAG: socket.gethostname(), PID_TAG: str(_dead_pid())})
    searched: list[str] = []
    own = Store.runs_tagged
    monkeypatch.setattr(Store, "runs_tagged", lambda self, *a, **k: searched.append(a[2]) or own(self, *a, **k))
    plan = plan_run(spec, True, store)
    tracker = open_tracker(spec, store, plan, "cpu")
    tracker.close("failed")
    assert searched.count(fp) == (2 if left_running else 1), searched
    assert plan.claim is None and tracker.run_id is not None
    if lost is not None:
        run = store.get_run(lost)
        assert run.info.status == "KILLED" and run.data.tags["outcome"] == "lost"
