"""Before a job trains: is there something to continue, something already done, or nothing?

`plan_run` looks at an explicit `ckpt_path` / `resume=true`, and, for the jobs of a multirun, at the
runs of the same identity already in MLflow (`src.tracking.sweep.decide`). Every checkpoint is checked
against the config before any MLflow run is touched, so a mismatch changes no one's record. A run
to resume or skip on that other code made follows `sweep.on_code_change` (src.tracking.code).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lightning.pytorch.utilities import rank_zero_only

from src.atomic_io import move_aside, remove_partial_writes
from src.paths import ConfigError
from src.tracking.code import code_state
from src.tracking.credentials import redact_uri
from src.tracking.store import Store
from src.tracking.sweep import (
    Claim,
    claim,
    code_change_message,
    decide,
    is_alive,
    made_by_other_code,
    settle_lost,
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
from src.training.checkpointing import check_checkpoint, read_run_state, resolve_ckpt_path
from src.training.run_result import RunResult
from src.training.run_spec import RunSpec

if TYPE_CHECKING:
    from src.tracking.store import Run

REPLACED_FOLDER = "replaced"  # beside last.ckpt: the checkpoints of the runs a new run replaced


@dataclass
class RunPlan:
    ckpt_path: Path | None = None  # resume from here
    run_id: str | None = None  # into this existing MLflow run
    supersede: list[str] = field(default_factory=list)  # earlier runs the new one replaces
    done: RunResult | None = None  # nothing to train: this is the job's result
    message: str = ""
    claim: Claim | None = None  # held until the job's run is open (train.open_tracker releases it)


def plan_run(spec: RunSpec, in_multirun: bool, store: Store | None) -> RunPlan:
    """`store`: the job's MLflow store, opened once (None without tracking)."""
    plan = _plan(spec, in_multirun, store)
    if plan.done is None and rank_zero_only.rank == 0:
        # This run alone trains into the folder now: a write a SIGKILL cut short is garbage.
        left = remove_partial_writes(spec.checkpoint.last)
        if left:
            note = f"removed {len(left)} unfinished checkpoint write(s) left by a killed process in {spec.checkpoint.folder}"
            plan.message = f"{plan.message}; {note}" if plan.message else f"{spec.run_name}: {note}"
    return plan


def _plan(spec: RunSpec, in_multirun: bool, store: Store | None) -> RunPlan:
    ck, identity = spec.checkpoint, spec.identity
    explicit = resolve_ckpt_path(ck)
    if explicit is not None:
        state = read_run_state(explicit)
        check_checkpoint(explicit, identity.fingerprint, identity.config, state)
        run_id = state.get("mlflow_run_id") if store is not None else None
        if run_id:
            assert store is not None
            run = store.get_run(run_id)
            if run is None:
                raise ConfigError(
                    f"ckpt_path: {explicit} belongs to MLflow run {run_id}, which is not in {redact_uri(store.uri)}"
                )
            if spec.store.on_code_change != "keep" and made_by_other_code(run, code_state()):
                # Continuing (or reporting) a run of other code is the user's call; `rerun` means a
                # new run, which an explicit checkpoint cannot be.
                raise ConfigError(
                    f"ckpt_path: {explicit}: {code_change_message(store, [run], code_state(), spec.store.on_code_change)}"
                    "; with ckpt_path only =keep applies (drop ckpt_path to train it again)"
                )
            if run.info.status == "FINISHED":
                return RunPlan(done=RunResult.from_run(run), message=f"run {run_id} already finished; nothing to resume")
        return RunPlan(explicit, run_id)
    if not in_multirun:
        return plan_single_run(spec, store)
    if store is None:
        return RunPlan()
    where = spec.store
    last = ck.last

    @functools.cache  # read at most once: the decision and the check below share it
    def last_state() -> dict:
        return read_run_state(last) if last.is_file() else {}

    def checkpoint_of(run: Run) -> bool:
        return last_state().get("mlflow_run_id") == run.info.run_id

    experiment_id = store.experiment_id(where.experiment_name, where.artifact_location)
    name = spec.shown_name or spec.run_name  # the variant's name (a norm × placement sweep: both axes)
    # Another copy of the sweep (another terminal or node) may be deciding this config right now.
    held, why = claim(store, experiment_id, identity.fingerprint, where.stale_after_s)
    if held is None:
        return RunPlan(done=RunResult(spec.run_name, RUNNING, 0.0, 0.0, None, None, None, None), message=f"{name}: warning: skipped, {why}")
    try:
        plan = _plan_from_decision(spec, store, experiment_id, last, last_state, checkpoint_of)
    except BaseException:
        held.release()
        raise
    if plan.done is not None:
        held.release()
    else:
        plan.claim = held
    return plan


def _plan_from_decision(
    spec: RunSpec,
    store: Store,
    experiment_id: str,
    last: Path,
    last_state: Callable[[], dict],
    checkpoint_of: Callable[[Run], bool],
) -> RunPlan:
    identity, where, name = spec.identity, spec.store, spec.shown_name or spec.run_name
    d = decide(
        store, experiment_id, identity.fingerprint, where.on_existing, where.stale_after_s, checkpoint_of,
        code_state(), where.on_code_change,
    )  # fmt: skip
    if d.action in ("skip", "busy"):
        assert d.run is not None
        note = "skipped" if d.action == "skip" else "warning: skipped"
        return RunPlan(done=RunResult.from_run(d.run), message=f"{name}: {note}, run {d.run.info.run_id} {d.reason}")
    if d.action == "resume":
        assert d.run is not None
        check_checkpoint(last, identity.fingerprint, identity.config, last_state())
        return RunPlan(last, d.run.info.run_id, message=f"{name}: run {d.run.info.run_id} {d.reason}")
    said = [f"run {d.run.info.run_id} {d.reason}"] if d.run is not None else []
    kept = keep_replaced_checkpoint(spec, last, last_state())
    if kept is not None:
        said.append(f"its checkpoint kept as {kept}")
    return RunPlan(supersede=d.supersede, message=f"{name}: {'; '.join(said)}" if said else "")


def keep_replaced_checkpoint(spec: RunSpec, last: Path, state: dict) -> Path | None:
    """A new run of this config is about to checkpoint into `last`'s folder: move the file there (a
    failed, superseded or other-code run's) to `replaced/<its run id>.ckpt`, so no run's state is
    written over. Rank 0 moves it; a DDP job's other ranks start the new run without reading it."""
    if not spec.checkpoint.enabled or not last.is_file() or rank_zero_only.rank != 0:
        return None
    to = last.parent / REPLACED_FOLDER / f"{state.get('mlflow_run_id') or 'unknown-run'}.ckpt"
    move_aside(last, to)
    return to


def plan_single_run(spec: RunSpec, store: Store | None) -> RunPlan:
    """A single run (no -m, no ckpt_path/resume): resume the run its `last.ckpt` belongs to when
    that run was interrupted (pre-empted, Ctrl+C, lost), as a sweep's job does; otherwise start a
    new run, which never writes over another run's checkpoint.

    Decided from the checkpoint file and its run's state, so the ranks of a DDP run decide alike
    (rank 0 may already have reopened the run when the others look: `running` counts as
    interrupted). Runs of its config left RUNNING by a SIGKILL are settled when it opens its own
    (`settle_lost_runs`): nothing is written to the store before the data checks pass.
    """
    ck, identity = spec.checkpoint, spec.identity
    if not ck.last.is_file():
        return RunPlan()
    state = read_run_state(ck.last)
    owner_id = state.get("mlflow_run_id")
    owner = store.get_run(owner_id) if store is not None and owner_id else None
    if owner is not None and state.get("fingerprint") == identity.fingerprint:
        outcome = owner.data.tags.get(OUTCOME_TAG, "")
        interrupted = owner.info.status != "FINISHED" and outcome in (*INTERRUPTED_OUTCOMES, RUNNING)
        if interrupted and SUPERSEDED_TAG not in owner.data.tags:
            if rank_zero_only.rank == 0 and owner.info.status == "RUNNING" and is_alive(owner, spec.store.stale_after_s):
                tags = owner.data.tags
                raise ConfigError(
                    f"checkpoint.dir: run {owner_id} of this config is training into {ck.folder} now "
                    f"(pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}); wait for it to end, or set "
                    "checkpoint.dir to another folder"
                )
            policy = spec.store.on_code_change
            if policy != "keep" and made_by_other_code(owner, code_state()):
                assert store is not None
                if policy != "rerun":
                    raise ConfigError(code_change_message(store, [owner], code_state(), policy))
                # Train it again: the new run replaces the interrupted one and its checkpoint.
                return RunPlan(supersede=[owner_id], message=f"{spec.run_name}: run {owner_id} was made by other code; training it again")
            check_checkpoint(ck.last, identity.fingerprint, identity.config, state)
            was = LOST if outcome == RUNNING else outcome
            return RunPlan(ck.last, owner_id, message=f"{spec.run_name}: run {owner_id} {was}; resuming from its checkpoint")
    if ck.enabled:
        raise ConfigError(f"checkpoint.dir: {overwrite_refusal(ck.last, state, owner, identity.fingerprint)}")
    return RunPlan()


def overwrite_refusal(path: Path, state: dict, owner: Run | None, fp: str) -> str:
    """Why a new run may not write where `path` is, and what to do instead."""
    elsewhere = "set checkpoint.dir to another folder, or remove the file, to start a new run"
    if state.get("fingerprint") != fp:
        return f"{path} holds the checkpoint of another config; a new run would overwrite it: {elsewhere}"
    if owner is None:
        return f"{path} holds an earlier run's checkpoint; a new run would overwrite it: resume=true continues it, or {elsewhere}"
    outcome = owner.data.tags.get(OUTCOME_TAG, owner.info.status.lower())
    cont = "" if owner.info.status == "FINISHED" or outcome in (FINISHED, DIVERGED) else "resume=true continues it, or "
    return f"{path} holds the checkpoint of run {owner.info.run_id} ({outcome}); a new run would overwrite it: {cont}{elsewhere}"


def settle_lost_runs(spec: RunSpec, store: Store) -> None:
    """Before a job (single or in a sweep) opens its MLflow run: mark KILLED (`lost`) the runs of its
    config left RUNNING by a process that is gone, the one it resumes included (it reopens it). The
    run plan only reads the store; this is the one place lost runs are settled, after every check
    of the config, so a refused run still records nothing."""
    if rank_zero_only.rank != 0:
        return
    where = spec.store
    experiment_id = store.experiment_id(where.experiment_name, where.artifact_location)
    settle_lost(store, experiment_id, spec.identity.fingerprint, where.stale_after_s)


def already_done(spec: RunSpec, store: Store) -> tuple[RunResult, str] | None:
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
        d = decide(
            store, experiment_id, spec.identity.fingerprint, where.on_existing, where.stale_after_s, checkpoint_of,
            code_state(), where.on_code_change,
        )  # fmt: skip
    except ConfigError:  # the job itself refuses it, in its own words
        return None
    if d.action != "skip" or d.run is None:
        return None
    return RunResult.from_run(d.run), f"{spec.shown_name or spec.run_name}: skipped, run {d.run.info.run_id} {d.reason}"
