"""What a run is, decided once per job, and its record opened: the owner of a run's life in the store.

From the run's identity, the store and the checkpoint folder, `plan_run` decides what a job is:

    done        its result is recorded (FINISHED, or diverged): nothing to train, the result is returned
    resume      pre-empted, killed or lost with a checkpoint of its own: continue the same MLflow run
    lost        RUNNING, but its process is gone: settled as KILLED (`lost`) when the run opens, then resumed
    superseded  failed, or `sweep.on_existing=rerun`: a new run replaces it (its checkpoint is kept aside)
    new         nothing of this config yet

An explicit `ckpt_path` / `resume=true` is checked against the config before any MLflow run is touched,
so a mismatch changes no one's record. A run to resume or skip on that other code made follows
`sweep.on_code_change` (src.tracking.code). A sweep's job holds a claim on its config (src.tracking.sweep)
from the decision until its run is open (`open_tracker`), so two copies of a sweep never train one config
twice. With several processes, rank 0 decides and the plan is broadcast (`decided_once`); a launcher
asks `already_done` (read-only) before it submits anything. The other modules ask this one; it asks the
store. Lightning's side of the run, which opens the record as the fit sets up and closes it with the
fit's outcome, is `RunLife` (src/training/run_life.py).
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch.distributed as dist
from lightning.fabric.plugins.environments import (
    ClusterEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from lightning.pytorch.utilities import rank_zero_only

from src.core.atomic_io import move_aside, remove_partial_writes
from src.core.cli import in_multirun
from src.core.paths import ConfigError, PeerRefused
from src.tracking import unsent
from src.tracking.checkpoint_file import read_run_state, resolve_ckpt_path
from src.tracking.code import CodeState
from src.tracking.identity import CheckpointSpec, Identity, check_checkpoint
from src.tracking.record import RecordSpec, RunResult, StoreSpec
from src.tracking.store import Store
from src.tracking.store_uri import redact_uri
from src.tracking.sweep import (
    PARENT_ENV,
    POLICIES,
    REUSES,
    JobAction,
    Lock,
    before_init_runs,
    by_state,
    code_change_message,
    is_alive,
    made_at,
    made_by_other_code,
    runs_with_fingerprint,
    take_lock,
)
from src.tracking.tags import (
    DIVERGED,
    FINISHED,
    HOST_TAG,
    INTERRUPTED_OUTCOMES,
    LOST,
    OUTCOME_TAG,
    PID_TAG,
    RUNNING,
    SUPERSEDED_TAG,
)
from src.tracking.tracker import Tracker
from src.tracking.unsent import REPLACED_FOLDER, UNSENT_FILE, is_deleted

if TYPE_CHECKING:
    from src.tracking.store import Run


class PlannedRun(Protocol):
    """What the plan reads of a run's spec (`src.training.run_spec.RunSpec` is one)."""

    @property
    def run_name(self) -> str: ...
    @property
    def shown_name(self) -> str: ...
    @property
    def identity(self) -> Identity: ...
    @property
    def checkpoint(self) -> CheckpointSpec: ...
    @property
    def store(self) -> StoreSpec: ...
    @property
    def record(self) -> RecordSpec: ...



def deleted_run_message(store: Store, run_id: str, last: Path) -> str:
    """The two ways on from a checkpoint whose MLflow run was deleted: restore the run, or start over."""
    uri = redact_uri(store.uri)
    return (
        f"{last} holds the checkpoint of run {run_id}, which was deleted in MLflow ({uri}): "
        f"`MLFLOW_TRACKING_URI={uri} mlflow runs restore --run-id {run_id}` brings it back to be continued, "
        f"or remove {last} (and {last.parent / UNSENT_FILE} if there) to start over"
    )


# --- what the store says: the decision for a config's latest run


def settle_lost(store: Store, experiment_id: str, fp: str, stale_after_s: float) -> list[str]:
    """Mark KILLED (`outcome=lost`) the RUNNING runs of this identity whose process is gone.

    A SIGKILL leaves a run RUNNING; the next run of its config settles it instead of leaving it
    RUNNING forever. The one place that does: a job, single or in a sweep, as it opens its own run
    (`settle_lost_runs`), after every check of its config; `decide` only reads.
    """
    lost = [r for r in runs_with_fingerprint(store, experiment_id, fp) if r.info.status == "RUNNING"]
    lost = [r for r in lost if not is_alive(r, stale_after_s)]
    for run in lost:
        store.set_tags(run.info.run_id, {OUTCOME_TAG: LOST})
        store.terminate(run.info.run_id, "KILLED")
    return [r.info.run_id for r in lost]


def supersede(store: Store, old_run_ids: Sequence[str], new_run_id: str) -> None:
    for run_id in old_run_ids:
        store.set_tags(run_id, {SUPERSEDED_TAG: new_run_id})


def decide_job(
    store: Store,
    experiment_id: str,
    fp: str,
    policy: str,
    stale_after_s: float,
    checkpoint_of: Callable[[Run], bool],
    code: CodeState | None = None,
    on_code_change: str = "fail",
    before_init: str | None = None,
    runs: list[Run] | None = None,
) -> JobAction:
    """What a job with fingerprint `fp` should do; `checkpoint_of(run)`: a checkpoint of that run exists.

    `code`: this process's code; a run to reuse that other code made follows `on_code_change`
    (None: no code check). `before_init`: the fingerprint this config had before `model.init`
    existed (Identity.before_init): a new run says which runs that was, and why it is not them.
    `runs`: the runs of `fp` (`runs_with_fingerprint`) when the caller has read them; else read here.
    Changes no record: a lost run is settled when the job opens its run."""
    if runs is None:
        runs = runs_with_fingerprint(store, experiment_id, fp)
    if not runs:
        return before_init_runs(store, experiment_id, before_init) or JobAction("new")
    latest = runs[0]
    if policy == "fail":
        raise ConfigError(
            f"sweep.on_existing=fail: run {latest.info.run_id} ({latest.info.run_name}) already has this config "
            f"(fingerprint {fp}); valid choices: {', '.join(POLICIES)}"
        )
    if policy == "rerun":
        return JobAction("new", latest, "sweep.on_existing=rerun", [r.info.run_id for r in runs if r.info.status != "RUNNING"])
    d = by_state(latest, stale_after_s, checkpoint_of)
    if code is None or d.action not in REUSES or not made_by_other_code(latest, code):
        return d
    if on_code_change == "fail":
        raise ConfigError(code_change_message(store, [latest], code))
    at = made_at(latest)
    if on_code_change == "rerun":
        return JobAction("new", latest, f"made by other code ({at}); training it again (sweep.on_code_change=rerun)", [latest.info.run_id])
    return JobAction(d.action, latest, f"{d.reason}; made by other code ({at}), kept (sweep.on_code_change=keep)")




# --- the plan: done / resume / lost -> settle / superseded / new


@dataclass
class RunPlan:
    ckpt_path: Path | None = None  # resume from here
    run_id: str | None = None  # into this existing MLflow run
    supersede: list[str] = field(default_factory=list)  # earlier runs the new one replaces
    done: RunResult | None = None  # nothing to train: this is the job's result
    message: str = ""
    claim: Lock | None = None  # held until the job's run is open (`open_tracker` releases it)
    # The runs of its config may hold one left RUNNING by a process that is gone (`settle_lost_runs`
    # looks). False for a sweep's job whose decision, under its claim, read no RUNNING run: the
    # claim keeps other copies of the sweep from opening one, and a run another process opens or
    # reopens after that is alive, so searching again as its run opens (~4 ms of CPU a job) would
    # find none to settle. A process that opens a run there and dies before this job's run opens
    # leaves it for the next run of the config to settle.
    lost_possible: bool = True


def plan_run(spec: PlannedRun, in_multirun: bool, store: Store | None) -> RunPlan:
    """`store`: the job's MLflow store, opened once (None without tracking)."""
    plan = _plan(spec, in_multirun, store)
    if plan.done is None and rank_zero_only.rank == 0:
        # This run alone trains into the folder now: a write a SIGKILL cut short is garbage.
        left = remove_partial_writes(spec.checkpoint.last)
        if left:
            note = f"removed {len(left)} unfinished checkpoint write(s) left by a killed process in {spec.checkpoint.folder}"
            plan.message = f"{plan.message}; {note}" if plan.message else f"{spec.run_name}: {note}"
    return plan


def _plan(spec: PlannedRun, in_multirun: bool, store: Store | None) -> RunPlan:
    """The three ways a job finds its run: the checkpoint it was given, the checkpoint in its folder (a
    single run), or the store's runs of its config (a sweep's job)."""
    explicit = resolve_ckpt_path(spec.checkpoint)
    if explicit is not None:
        return plan_explicit(spec, explicit, store)
    if not in_multirun:
        return plan_single_run(spec, store)
    if store is None:
        return RunPlan()
    return plan_sweep_job(spec, store)


def plan_explicit(spec: PlannedRun, explicit: Path, store: Store | None) -> RunPlan:
    """`ckpt_path=...` / `resume=true`: the checkpoint must be this config's; its run, if recorded, is continued."""
    state = read_run_state(explicit)
    identity, policy = spec.identity, spec.store.on_code_change
    check_checkpoint(explicit, identity.fingerprint, identity.config, state)
    run_id = state.get("mlflow_run_id") if store is not None else None
    if not run_id:
        return RunPlan(explicit, None)
    assert store is not None
    run = store.get_run(run_id)
    if is_deleted(run):
        raise ConfigError(f"ckpt_path: {deleted_run_message(store, run_id, explicit)}")
    if run is None:
        raise ConfigError(
            f"ckpt_path: {explicit} belongs to MLflow run {run_id}, which is not in {redact_uri(store.uri)}: restore "
            "the store that holds it to continue the run, or drop ckpt_path/resume=true and remove the file (or set "
            "checkpoint.dir to another folder) to start a new run"
        )
    if policy != "keep" and made_by_other_code(run, spec.record.code):
        # Continuing (or reporting) a run of other code is the user's call; `rerun` means a new run,
        # which an explicit checkpoint cannot be.
        raise ConfigError(
            f"ckpt_path: {explicit}: {code_change_message(store, [run], spec.record.code, policy)}"
            "; with ckpt_path only =keep applies (drop ckpt_path to train it again)"
        )
    if run.info.status == "FINISHED":
        return RunPlan(done=RunResult.from_run(run), message=f"run {run_id} already finished; nothing to resume")
    return RunPlan(explicit, run_id)


def plan_sweep_job(spec: PlannedRun, store: Store) -> RunPlan:
    """A sweep's job: the latest run of its config decides (`decide`), under the job's claim on the config."""
    where, identity, last = spec.store, spec.identity, spec.checkpoint.last
    name = spec.shown_name  # the variant's name (a norm × placement sweep: both axes)
    enabled = spec.checkpoint.enabled

    @functools.cache  # read at most once: the decision and the check below share it
    def last_state() -> dict:
        return read_run_state(last) if last.is_file() else {}

    def checkpoint_of(run: Run) -> bool:
        return last_state().get("mlflow_run_id") == run.info.run_id

    experiment_id = store.experiment_id(where.experiment_name, where.artifact_location)
    # Another copy of the sweep (another terminal or node) may be deciding this config right now.
    held, why = take_lock(store, experiment_id, identity.fingerprint, where.stale_after_s)
    if held is None:
        return RunPlan(done=RunResult(spec.run_name, RUNNING, 0.0, 0.0, None, None, None, None), message=f"{name}: warning: skipped, {why}")
    try:
        runs = runs_with_fingerprint(store, experiment_id, identity.fingerprint)  # read under the claim
        lost_possible = any(r.info.status == "RUNNING" for r in runs)
        d = decide_job(
            store, experiment_id, identity.fingerprint, where.on_existing, where.stale_after_s, checkpoint_of,
            spec.record.code, where.on_code_change, identity.before_init, runs,
        )  # fmt: skip
        if d.action in ("skip", "busy"):
            assert d.run is not None
            held.release()
            note = "skipped" if d.action == "skip" else "warning: skipped"
            return RunPlan(done=RunResult.from_run(d.run), message=f"{name}: {note}, run {d.run.info.run_id} {d.reason}")
        if d.action == "resume":
            assert d.run is not None
            check_checkpoint(last, identity.fingerprint, identity.config, last_state())
            return RunPlan(last, d.run.info.run_id, message=f"{name}: run {d.run.info.run_id} {d.reason}", claim=held,
                           lost_possible=lost_possible)  # fmt: skip
        said = [f"run {d.run.info.run_id} {d.reason}"] if d.run is not None else []
        # A new run of this config is about to checkpoint into `last`'s folder: the file there (a failed,
        # superseded or other-code run's) moves to `replaced/<its run id>.ckpt`, so no run's state is
        # written over. Rank 0 moves it; a DDP job's other ranks start the new run without reading it.
        if enabled and last.is_file() and rank_zero_only.rank == 0:
            said.append(_keep_aside(store, last, last_state().get("mlflow_run_id")))
        message = f"{name}: {'; '.join(said)}" if said else ""
        return RunPlan(supersede=d.supersede, message=message, claim=held, lost_possible=lost_possible)
    except BaseException:
        held.release()
        raise


def _keep_unsent_aside(folder: Path, run_id: str) -> Path | None:
    """Move the folder's unsent metrics file, whole, to `replaced/` beside the checkpoint of `run_id`
    moved there; where it went (None when there was none). An earlier one there is not written over."""
    path = folder / UNSENT_FILE
    if not path.is_file():
        return None
    to, n = unsent.kept_for(folder, run_id), 1
    while to.exists():
        n += 1
        to = unsent.kept_for(folder, f"{run_id}.{n}")
    move_aside(path, to)
    return to


def _keep_aside(store: Store, last: Path, owner_id: str | None) -> str:
    """Move the checkpoint a new run would overwrite to `replaced/<its run id>.ckpt`, with the metrics
    its server never acknowledged when this store cannot take them (the run is in another store, or
    deleted in MLflow: in this one they are sent to it as the new run opens); what was kept, in words.
    A sweep's job starts over where a single run refuses: the sweep must finish, and nothing is lost."""
    kept = last.parent / REPLACED_FOLDER / f"{owner_id or 'unknown-run'}.ckpt"
    move_aside(last, kept)
    owner = store.get_run(owner_id) if owner_id else None
    aside = _keep_unsent_aside(last.parent, owner_id) if owner_id and not unsent.can_take(owner) else None
    what = f"its checkpoint kept as {kept}" + (f" and its unsent metrics as {aside}" if aside else "")
    if not is_deleted(owner):
        return what
    return (
        f"run {owner_id} of this config was deleted in MLflow: a new run starts, {what} (to continue it "
        f"instead: `mlflow runs restore --run-id {owner_id}`, move them back beside {last.name}, and run the same command)"
    )


def plan_single_run(spec: PlannedRun, store: Store | None) -> RunPlan:
    """A single run (no -m, no ckpt_path/resume): resume the run its `last.ckpt` belongs to when
    that run was interrupted (pre-empted, Ctrl+C, lost), as a sweep's job does; otherwise start a
    new run, which never writes over another run's checkpoint.

    Decided from the checkpoint file and its run's state, so the ranks of a DDP run decide alike
    (rank 0 may already have reopened the run when the others look: `running` counts as
    interrupted). Runs of its config left RUNNING by a SIGKILL are settled when it opens its own
    (`settle_lost_runs`): nothing is written to the store before the data checks pass.
    """
    ck, identity, policy = spec.checkpoint, spec.identity, spec.store.on_code_change
    if not ck.last.is_file():
        return RunPlan()
    state = read_run_state(ck.last)
    fp = identity.fingerprint
    owner_id = state.get("mlflow_run_id")
    owner = store.get_run(owner_id) if store is not None and owner_id else None
    if is_deleted(owner) and state.get("fingerprint") == fp:
        assert store is not None and owner_id
        raise ConfigError(f"checkpoint.dir: {deleted_run_message(store, owner_id, ck.last)}")
    if owner is not None and state.get("fingerprint") == fp:
        tags = owner.data.tags
        outcome = tags.get(OUTCOME_TAG, "")
        interrupted = owner.info.status != "FINISHED" and outcome in (*INTERRUPTED_OUTCOMES, RUNNING)
        if interrupted and SUPERSEDED_TAG not in tags:
            if rank_zero_only.rank == 0 and owner.info.status == "RUNNING" and is_alive(owner, spec.store.stale_after_s):
                raise ConfigError(
                    f"checkpoint.dir: run {owner_id} of this config is training into {ck.folder} now "
                    f"(pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}); wait for it to end, or set "
                    "checkpoint.dir to another folder"
                )
            if policy != "keep" and made_by_other_code(owner, spec.record.code):
                assert store is not None
                if policy != "rerun":
                    raise ConfigError(code_change_message(store, [owner], spec.record.code, policy))
                # Train it again: the new run replaces the interrupted one and its checkpoint.
                return RunPlan(supersede=[owner_id], message=f"{spec.run_name}: run {owner_id} was made by other code; training it again")
            check_checkpoint(ck.last, fp, identity.config, state)
            was = LOST if outcome == RUNNING else outcome
            return RunPlan(ck.last, owner_id, message=f"{spec.run_name}: run {owner_id} {was}; resuming from its checkpoint")
    if not ck.enabled:
        return RunPlan()
    # A new run would overwrite the checkpoint there: say whose it is, and what to do instead.
    path, elsewhere = ck.last, "set checkpoint.dir to another folder, or remove the file, to start a new run"
    if state.get("fingerprint") != fp:
        why = f"{path} holds the checkpoint of another config; a new run would overwrite it: {elsewhere}"
    elif owner is None and store is not None and owner_id:
        # resume=true would be refused too (plan_explicit): its run is not there to continue.
        why = (
            f"{path} holds the checkpoint of run {owner_id}, which is not in {redact_uri(store.uri)} (a store deleted or "
            f"replaced since); a new run would overwrite it: {elsewhere} (to continue that run, restore the store that holds it)"
        )
    elif owner is None:
        why = f"{path} holds an earlier run's checkpoint; a new run would overwrite it: resume=true continues it, or {elsewhere}"
    else:
        outcome = owner.data.tags.get(OUTCOME_TAG, owner.info.status.lower())
        cont = "" if owner.info.status == "FINISHED" or outcome in (FINISHED, DIVERGED) else "resume=true continues it, or "
        why = f"{path} holds the checkpoint of run {owner.info.run_id} ({outcome}); a new run would overwrite it: {cont}{elsewhere}"
    raise ConfigError(f"checkpoint.dir: {why}")


def settle_lost_runs(spec: PlannedRun, store: Store) -> None:
    """Before a job (single or in a sweep) opens its MLflow run: mark KILLED (`lost`) the runs of its
    config left RUNNING by a process that is gone, the one it resumes included (it reopens it). The
    run plan only reads the store; this is the one place lost runs are settled, after every check
    of the config, so a refused run still records nothing."""
    if rank_zero_only.rank != 0:
        return
    where = spec.store
    experiment_id = store.experiment_id(where.experiment_name, where.artifact_location)
    settle_lost(store, experiment_id, spec.identity.fingerprint, where.stale_after_s)


def already_done(spec: PlannedRun, store: Store) -> tuple[RunResult, str] | None:
    """(the result, the line a job would print) for a sweep job that needs no process at all: the
    latest run of its identity is FINISHED (or diverged) and the sweep's rules reuse it. Read-only —
    nothing is claimed, settled or moved — so a launcher can ask before it submits anything; any
    other case (new, resume, busy, a code change, a refusal) is left to the job's own plan."""
    where, last = spec.store, spec.checkpoint.last
    if where.on_existing != "resume":
        return None
    experiment_id = store.experiment_id(where.experiment_name, where.artifact_location)

    def checkpoint_of(run: Run) -> bool:
        return last.is_file() and read_run_state(last).get("mlflow_run_id") == run.info.run_id

    try:
        d = decide_job(
            store, experiment_id, spec.identity.fingerprint, where.on_existing, where.stale_after_s, checkpoint_of,
            spec.record.code, where.on_code_change,
        )  # fmt: skip
    except ConfigError:  # the job itself refuses it, in its own words
        return None
    if d.action != "skip" or d.run is None:
        return None
    return RunResult.from_run(d.run), f"{spec.shown_name or spec.run_name}: skipped, run {d.run.info.run_id} {d.reason}"


# --- one decision per job, however many processes it has
# Rank 0 may wait this long for the store or another copy's claim before it broadcasts its plan.
DECISION_TIMEOUT = datetime.timedelta(minutes=30)


def launched_environment(world_size: int) -> ClusterEnvironment | None:
    """The environment of a job whose `world_size` processes were started by SLURM or torchrun."""
    if world_size < 2:
        return None
    if SLURMEnvironment.detect() and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return SLURMEnvironment(auto_requeue=False)  # the requeue path is ours (src/training/preemption.py)
    if TorchElasticEnvironment.detect() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return TorchElasticEnvironment()
    return None


def join_process_group(env: ClusterEnvironment, device_type: str) -> None:
    """The job's process group, formed once per process (sequential sweep jobs of one torchrun reuse it)."""
    if dist.is_initialized():
        return
    os.environ["MASTER_ADDR"] = env.main_address
    os.environ["MASTER_PORT"] = str(env.main_port)
    # The plan travels over gloo; on GPUs Lightning's collectives take NCCL for CUDA tensors.
    backend = "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(
        backend, rank=env.global_rank(), world_size=env.world_size(), timeout=DECISION_TIMEOUT
    )


def _broadcast(message: Any) -> Any:
    box = [message]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def decided_once(decide: Callable[[], RunPlan], world_size: int, device_type: str) -> RunPlan:
    """`decide()` on rank 0 alone, its plan shared with every rank of the job."""
    env = launched_environment(world_size)
    if env is None:
        return decide()
    join_process_group(env, device_type)
    if dist.get_rank() != 0:
        kind, plan = _broadcast(None)
        if kind == "refused":
            raise PeerRefused(plan)
        return plan
    try:
        plan = decide()
    except BaseException as err:
        _broadcast(("refused", f"{type(err).__name__}: {err}"))
        raise
    # The claim and the message are rank 0's: the others follow the decision, hold nothing, say nothing.
    _broadcast(("plan", replace(plan, claim=None, message="")))
    return plan


# --- the run's record opened (RunLife calls it as the fit sets up), the claim let go
def open_tracker(spec: PlannedRun, store: Store, plan: RunPlan, device: str) -> Tracker:
    """Settle the lost runs of this config, open (or reopen) the run's MLflow record, and tag the runs
    it supersedes; a sweep's job does it under its claim, which is released here."""
    try:
        parent = os.environ.get(PARENT_ENV) if in_multirun() else None
        if plan.lost_possible:
            settle_lost_runs(spec, store)  # under the claim of a sweep's job, like the run's creation below
        tracker = Tracker(store, spec.record, spec.identity.fingerprint, plan.run_id, parent, device,
                          spec.checkpoint.write_folder)  # fmt: skip
        if plan.supersede and tracker.run_id:
            supersede(store, plan.supersede, tracker.run_id)
        return tracker
    finally:
        release(plan)


def release(plan: RunPlan) -> None:
    """Let go of a sweep job's claim on its config (once its run is open, or when it stops before)."""
    if plan.claim is not None:
        plan.claim.release()
        plan.claim = None

