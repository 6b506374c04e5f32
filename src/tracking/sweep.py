"""A sweep as the unit of work: find what a job already produced, decide what is left, show status.

Every training run carries its identity (`src.tracking.identity.fingerprint`) as a tag, with the host, pid,
start time and a heartbeat. Before a multirun job trains, `decide` searches the experiment for the
latest run with the same fingerprint (not superseded) and returns one action:

    finished / diverged run             -> skip: the result is already recorded
    RUNNING, heartbeat fresh, pid alive -> busy: someone else is training it; skip with a warning
    RUNNING, stale or pid gone          -> lost (the job settles it as KILLED, `settle_lost`), then as pre-empted:
    pre-empted / lost / killed          -> resume it from its checkpoint (same MLflow run) if the
                                           checkpoint belongs to it, else start a new run
    failed                              -> start a new run; the old one is tagged superseded_by

Two copies of a sweep (two terminals, two nodes, sharing only the store) must not both train a
config: `decide` and the creation of the run it leads to are bracketed by a claim (`claim`), a
mutual exclusion that works through MLflow itself, on a server as on a SQLite file.

`sweep.on_existing=rerun` always starts new runs (a changed method), `fail` refuses to run a config
that already has runs. A run to skip on or resume into that was made by other code (its code
fingerprint, src.tracking.code, differs from this process's; a run recorded before code
fingerprints counts as other code) follows `sweep.on_code_change`: `fail` stops, naming the runs, their
commit and the files that differ; `rerun` starts a new run that supersedes it; `keep` reuses it.
`code_conflicts` finds them for a whole sweep before its first job trains. A sweep's parent run (MLflow nested runs) holds the job list, so `status`
can also name the jobs that never started. Torch-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from src.core.cli import COMMAND_ENV
from src.core.schema import SweepSchema
from src.core.unseeded import UNSEEDED
from src.tracking.code import MANIFEST_ARTIFACT, CodeState, differences, read_manifest
from src.tracking.identity import INIT_BEFORE_THE_KEY, INIT_KEY
from src.tracking.store import Store
from src.tracking.tags import (
    CODE_FINGERPRINT_TAG,
    COMMAND_TAG,
    FAILED,
    FINGERPRINT_TAG,
    FINISHED,
    GIT_COMMIT_TAG,
    GIT_DIRTY_TAG,
    HEARTBEAT_TAG,
    HOST_TAG,
    INTERRUPTED_OUTCOMES,
    KILLED,
    LOST,
    OUTCOME_TAG,
    PARENT_TAG,
    PID_TAG,
    RESULT_OUTCOMES,
    RUNNING,
    STARTED_TAG,
    SUPERSEDED_TAG,
    SWEEP_TAG,
    VARIANT_TAG,
)

if TYPE_CHECKING:
    from mlflow.entities import Run

PARENT_ENV = "NORMSWEEP_PARENT_RUN_ID"  # the parent run of the jobs this process launches
JOBS_ARTIFACT = "sweep/jobs.json"
JOBS_FILE = "normsweep_jobs.json"  # the same list in the multirun folder
POLICIES = ("resume", "rerun", "fail")
CODE_POLICIES = ("fail", "rerun", "keep")  # sweep.on_code_change
REUSES = ("skip", "resume")  # the decisions that take a recorded run's result or state as this job's
MAX_NAMED_FILES = 6  # files named in the code-change message; the rest are counted
# A run is FINISHED only once these are in MLflow: without them the report would miss its seed.
REQUIRED_FINAL_METRICS = ("test_loss", "final_train_loss", "steps_done", "train_time_s")
STALE_AFTER_S = float(SweepSchema.stale_after_s)  # `sweep.stale_after_s` where a reader has no config


def liveness_tags() -> dict[str, str]:
    now = f"{time.time():.0f}"
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()), STARTED_TAG: now, HEARTBEAT_TAG: now}
    command = os.environ.get(COMMAND_ENV)
    return {**tags, COMMAND_TAG: command} if command else tags


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def heartbeat_age_s(run: Run, now: float | None = None) -> float:
    tags = run.data.tags
    last = float(tags.get(HEARTBEAT_TAG) or tags.get(STARTED_TAG) or run.info.start_time / 1000)
    return (now or time.time()) - last


def is_alive(run: Run, stale_after_s: float) -> bool:
    """A RUNNING run is alive while its heartbeat is fresh and, on this host, its process exists."""
    tags = run.data.tags
    same_host = tags.get(HOST_TAG) == socket.gethostname() and tags.get(PID_TAG, "").isdigit()
    # On this host a dead pid (or our own: a run this very process left behind) settles it at once.
    if same_host and (not pid_alive(int(tags[PID_TAG])) or int(tags[PID_TAG]) == os.getpid()):
        return False
    return heartbeat_age_s(run) < stale_after_s


def runs_with_fingerprint(store: Store, experiment_id: str, fp: str) -> list[Run]:
    """Training runs of this identity, latest first, superseded ones left out."""
    runs = store.runs_tagged(experiment_id, FINGERPRINT_TAG, fp, most=1000)
    return [r for r in runs if SUPERSEDED_TAG not in r.data.tags]


# --- the code that made a run (src.tracking.code) ----------------------------------------------


@dataclass
class JobAction:
    action: str  # new | skip | resume | busy
    run: Run | None = None  # the existing run it concerns
    reason: str = ""
    supersede: list[str] = field(default_factory=list)  # runs the new run replaces


def by_state(latest: Run, stale_after_s: float, checkpoint_of: Callable[[Run], bool]) -> JobAction:
    """The decision the latest run of a config calls for (under on_existing=resume); changes no record."""
    outcome = latest.data.tags.get(OUTCOME_TAG, "")
    state = run_state(latest, stale_after_s)
    if state == RUNNING:
        age = heartbeat_age_s(latest)
        host = latest.data.tags.get(HOST_TAG, "?")
        return JobAction("busy", latest, f"running on {host} (heartbeat {age:.0f} s ago)")
    if state == LOST:
        outcome = LOST
    missing = [k for k in REQUIRED_FINAL_METRICS if k not in latest.data.metrics]
    if latest.info.status == "FINISHED" and outcome == FINISHED and missing:
        # Closed FINISHED without its results (older versions did, after a kill in the test phase).
        outcome = f"finished without {', '.join(missing)}"
        if checkpoint_of(latest):
            return JobAction("resume", latest, f"{outcome}; resuming from its checkpoint")
        return JobAction("new", latest, f"{outcome}; starting a new run", [latest.info.run_id])
    if latest.info.status == "FINISHED" or outcome in RESULT_OUTCOMES:
        return JobAction("skip", latest, f"already {outcome or FINISHED}")
    if outcome in INTERRUPTED_OUTCOMES or latest.info.status == "KILLED":
        if checkpoint_of(latest):
            return JobAction("resume", latest, f"{outcome or KILLED}; resuming from its checkpoint")
        return JobAction("new", latest, f"{outcome or KILLED} without a checkpoint", [latest.info.run_id])
    return JobAction("new", latest, f"{outcome or FAILED}; starting a new run", [latest.info.run_id])


def predates_init(run: Run) -> bool:
    """A run recorded before `model.init` existed: its config (params) has no such key, and it
    started from GPT-2's init. A run that recorded no config says nothing either way."""
    params = run.data.params
    return bool(params) and INIT_KEY not in params


def before_init_runs(store: Store, experiment_id: str, before_init: str | None) -> JobAction | None:
    """A new run of a config whose runs recorded before `model.init` existed trained another init:
    the decision that says so (None when there are none)."""
    if before_init is None:
        return None
    earlier = [r for r in runs_with_fingerprint(store, experiment_id, before_init) if predates_init(r)]
    if not earlier:
        return None
    n = len(earlier)
    return JobAction("new", earlier[0], (
        f"{'and ' + str(n - 1) + ' more ' if n > 1 else ''}of this config {'were' if n > 1 else 'was'} recorded before "
        f"{INIT_KEY} existed, with {INIT_KEY}={INIT_BEFORE_THE_KEY} (GPT-2's N(0, 0.02)); this job's {INIT_KEY} differs, "
        f"so it trains a new run beside them; {INIT_KEY}={INIT_BEFORE_THE_KEY} finds them again, and sweep.on_code_change "
        "(fail | rerun | keep) then says whether they are reused"
    ))  # fmt: skip


def made_by_other_code(run: Run, code: CodeState) -> bool:
    """A run without a code fingerprint predates them: its code is unknown, so it counts as other code."""
    return run.data.tags.get(CODE_FINGERPRINT_TAG) != code.fingerprint


def made_at(run: Run) -> str:
    """'commit 401e44d', '... with uncommitted changes', or 'commit unknown' (no checkout)."""
    commit = run.data.tags.get(GIT_COMMIT_TAG, "unknown")
    dirty = " with uncommitted changes" if run.data.tags.get(GIT_DIRTY_TAG) == "true" else ""
    return f"commit {commit[:7] if commit != 'unknown' else commit}{dirty}"


# The code each job runs, by the job's config fingerprint: one CodeState when every job runs the same
# code; a mapping when some run a norm of the user's, whose file joins their code (src.tracking.code).
JobCode = CodeState | Mapping[str, CodeState]


def code_of(code: JobCode, run: Run) -> CodeState:
    """The code the job of `run`'s config runs now."""
    if isinstance(code, CodeState):
        return code
    return code[run.data.tags.get(FINGERPRINT_TAG, "")]


def code_conflicts(
    store: Store,
    experiment_id: str,
    fingerprints: Sequence[str],
    code: JobCode,
    stale_after_s: float,
    checkpoint_of: Callable[[Run], bool],
) -> list[Run]:
    """The runs made by other code that jobs of these config fingerprints would skip on or resume
    into (what `decide` would find, job by job), without changing any record."""
    found = []
    for fp in dict.fromkeys(fingerprints):
        runs = runs_with_fingerprint(store, experiment_id, fp)
        if runs and by_state(runs[0], stale_after_s, checkpoint_of).action in REUSES and made_by_other_code(runs[0], code_of(code, runs[0])):
            found.append(runs[0])
    return found


def _recorded_code(store: Store, run: Run) -> CodeState | None:
    try:
        return read_manifest(store.read_text(run.info.run_id, MANIFEST_ARTIFACT))
    except Exception:  # no such artifact (a run that stopped before writing it), an unreachable artifact store
        return None


def _what_differs(store: Store, runs: Sequence[Run], code: JobCode) -> str:
    if not runs[0].data.tags.get(CODE_FINGERPRINT_TAG):
        return "recorded before code fingerprints, code unknown"
    recorded = _recorded_code(store, runs[0])  # one manifest per code fingerprint: they are the same
    if recorded is None:
        return "no code manifest recorded"
    changed = differences(recorded, code_of(code, runs[0]))
    more = len(changed) - MAX_NAMED_FILES
    if not changed:
        return "same files and versions, recorded differently"
    named = ", ".join(changed[:MAX_NAMED_FILES]) + (f" and {more} more" if more > 0 else "")
    return f"{named} {'differs' if len(changed) == 1 else 'differ'}"


def code_change_message(store: Store, runs: Sequence[Run], code: JobCode, policy: str = "fail") -> str:
    """One line: how many runs other code made, at which commit, which files differ, and the setting."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.data.tags.get(CODE_FINGERPRINT_TAG, ""), []).append(run)
    parts = []
    for group in groups.values():
        commits = ", ".join(dict.fromkeys(made_at(r) for r in group))
        parts.append(f"{len(group)} at {commits} ({_what_differs(store, group, code)})")
    n = len(runs)
    old = sum(predates_init(r) for r in runs)
    init = f" ({old} recorded before {INIT_KEY} existed: they started from {INIT_KEY}={INIT_BEFORE_THE_KEY}, as this config does)" if old else ""
    return (
        f"sweep.on_code_change={policy}: {n} finished or resumable run{'s' if n != 1 else ''} of this sweep "
        f"{'were' if n != 1 else 'was'} made by other code: {'; '.join(parts)}{init}; "
        "set sweep.on_code_change=rerun to train them again (the old runs stay, marked superseded) "
        f"or =keep to reuse them (the report marks them); valid choices: {', '.join(CODE_POLICIES)}"
    )


# --- claims: one copy of a sweep at a time decides and opens a config's run ------------------
#
# A claim is an experiment tag `normsweep.claim.<fingerprint>.<token>` (host, pid, time, held, and
# the claimant's place in line: when it first asked, and its id). A job writes its own claim, then
# reads the experiment's tags: alone, it holds the claim (and marks it held). With another live claim:
# one that is held (someone is opening that run) makes it withdraw (delete its own) and skip; one
# that only tries too, and is ahead in line, makes it withdraw and wait, its claim not written, until
# no claim ahead of it is left, then write it again; claims behind it it waits out, its own kept,
# until they withdraw. So when copies try at once the first in line wins, however slow the store:
# all withdrawing and trying again after a random back-off could collide every time (each sees the
# other's claim before it is withdrawn), and both copies then skipped the config, leaving it untrained.
# Why two jobs cannot both win: each wins only on a read made after its claim was last written, that
# claim never withdrawn after it, and the store (PostgreSQL behind a server, or SQLite) applies writes
# in one order; of two such claims, the one written second is stored before its writer reads, and
# after the first writer's claim, so that writer sees the first claim and cannot win. The holder
# releases the claim once its run is RUNNING, whose fresh heartbeat then makes `decide` answer `busy`
# (or `skip` once done) for anyone else. A claim whose process is gone (same host) or older than
# `sweep.stale_after_s` is ignored and removed, and so is one of the claimant's own earlier writes
# (an HTTP retry of a write can land after the claimant withdrew it).

CLAIM_PREFIX = "normsweep.claim."
CLAIM_BACKOFF_S = (0.2, 1.5)  # between two reads of a claimant that waits
CLAIM_WAIT_STALE = 2  # a claimant gives up after this many `sweep.stale_after_s`: every claim it waits on is stale by then


@dataclass
class Lock:
    """A held claim on one config of an experiment; `release` once its run exists (idempotent)."""

    store: Store
    experiment_id: str
    key: str
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            with contextlib.suppress(Exception):  # best effort: a stale claim is ignored anyway
                self.store.delete_experiment_tag(self.experiment_id, self.key)


def _claim_value(held: bool, since: float | None = None, by: str = "") -> str:
    now = time.time()
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": now, "held": held,
                       "since": now if since is None else since, "by": by})  # fmt: skip


def _claim_is_stale(value: dict[str, Any], stale_after_s: float) -> bool:
    if value.get("host") == socket.gethostname() and not pid_alive(int(value.get("pid", 0))):
        return True
    return time.time() - float(value.get("time", 0)) >= stale_after_s


def _place(value: dict[str, Any]) -> tuple[float, str]:
    """A claimant's place in line: when it first asked (then its id), the same for all its writes."""
    return float(value.get("since", value.get("time", 0))), str(value.get("by", ""))


def _live_claims(store: Store, experiment_id: str, prefix: str, mine: str | None, me: str, stale_after_s: float) -> list[dict[str, Any]]:
    """The other claims on this config that still count; stale ones, and earlier writes of this
    claimant (`me`) other than `mine`, are removed."""
    live: list[dict[str, Any]] = []
    for other, text in store.experiment_tags(experiment_id).items():
        if not other.startswith(prefix) or other == mine:
            continue
        try:
            value = json.loads(text)
        except ValueError:
            value = {}
        if value.get("by") == me or _claim_is_stale(value, stale_after_s):
            with contextlib.suppress(Exception):  # another job may have removed it first
                store.delete_experiment_tag(experiment_id, other)
        else:
            live.append(value)
    return live


def take_lock(store: Store, experiment_id: str, fp: str, stale_after_s: float) -> tuple[Lock | None, str]:
    """(a held claim, "") or (None, why another copy has it)."""
    prefix = f"{CLAIM_PREFIX}{fp}."
    me, since = uuid.uuid4().hex[:12], time.time()
    place = (since, me)
    give_up = time.monotonic() + CLAIM_WAIT_STALE * stale_after_s
    key: str | None = prefix + uuid.uuid4().hex[:12]  # this claimant's tag while it is written
    store.set_experiment_tag(experiment_id, key, _claim_value(False, since, me))
    while True:
        live = _live_claims(store, experiment_id, prefix, key, me, stale_after_s)
        if key is not None and not live:
            store.set_experiment_tag(experiment_id, key, _claim_value(True, since, me))
            return Lock(store, experiment_id, key), ""
        held = [v for v in live if v.get("held")]
        ahead = [v for v in live if _place(v) < place]
        waited_out = time.monotonic() > give_up
        if key is not None and (held or ahead or waited_out):
            store.delete_experiment_tag(experiment_id, key)  # withdrawn: no one waits on it
            key = None
        if held:
            v = held[0]
            return None, f"opened by {v.get('host', '?')} (pid {v.get('pid', '?')}) {time.time() - float(v.get('time', 0)):.0f} s ago"
        if waited_out:
            return None, f"another copy of the sweep was still claiming it after {time.time() - since:.0f} s"
        if key is None and not ahead:  # first in line now: ask again
            key = prefix + uuid.uuid4().hex[:12]
            store.set_experiment_tag(experiment_id, key, _claim_value(False, since, me))
            continue
        time.sleep(UNSEEDED.uniform(*CLAIM_BACKOFF_S))  # not in step with a copy seeded alike


@contextlib.contextmanager
def kept_fresh(held: Lock, every_s: float) -> Iterator[Lock]:
    """Hold `held` for longer than `sweep.stale_after_s` (a speed check can outlast it): its time is
    written again every `every_s` until the block ends, then it is released."""
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(Exception):  # best effort, as release: a missed refresh only ages it
                held.store.set_experiment_tag(held.experiment_id, held.key, _claim_value(held=True))

    thread = threading.Thread(target=refresh, name="normsweep-claim", daemon=True)
    thread.start()
    try:
        yield held
    finally:
        stop.set()
        thread.join()  # no refresh after the release below: it would leave a claim behind
        held.release()


# --- the sweep's job list and status ---------------------------------------------------------


def sweep_definition(experiment: str, command: str, parent_run_id: str, jobs: Sequence[dict[str, Any]]) -> str:
    """The sweep as JSON: written to the multirun folder and to the parent run."""
    body = {"experiment": experiment, "command": command, "parent_run_id": parent_run_id, "jobs": list(jobs)}
    return json.dumps(body, indent=1)


def read_definition(text: str) -> dict[str, Any]:
    return json.loads(text)


def run_state(run: Run, stale_after_s: float) -> str:
    """A training run's state, judged once for the report, `--status` and the sweep's decisions alike:
    an open run (RUNNING in MLflow) is `running` while it lives (`is_alive`), else `lost`, whatever
    outcome it tagged before its process died; a closed one is its `outcome` tag, or its MLflow status
    where it died before tagging one."""
    if run.info.status in ("RUNNING", "SCHEDULED"):
        return RUNNING if is_alive(run, stale_after_s) else LOST
    outcome = run.data.tags.get(OUTCOME_TAG, "")
    if outcome in (*RESULT_OUTCOMES, *INTERRUPTED_OUTCOMES, FAILED):
        return outcome
    return FINISHED if run.info.status == "FINISHED" else FAILED


def job_state(run: Run | None, stale_after_s: float) -> str:
    """`run_state` as `--status` shows it, with the heartbeat's age or what a re-run does."""
    if run is None:
        return "missing"
    state = run_state(run, stale_after_s)
    if state == RUNNING:
        return f"{RUNNING} (heartbeat {heartbeat_age_s(run):.0f} s ago)"
    if state == LOST and run.info.status == "RUNNING":
        return f"{LOST} (no heartbeat; a re-run resumes it)"
    return state


def status_rows(
    store: Store, experiment_id: str, jobs: Sequence[dict[str, Any]], stale_after_s: float
) -> list[dict[str, str]]:
    """One row per job of the sweep definition: its run (latest of its fingerprint) and state."""
    # The overrides every job shares (paths, the experiment, ...) are the command's, not the job's.
    shared = set.intersection(*(set(j.get("overrides", [])) for j in jobs)) if len(jobs) > 1 else set()
    rows = []
    for job in jobs:
        runs = runs_with_fingerprint(store, experiment_id, job["fingerprint"])
        run = runs[0] if runs else None
        rows.append(
            {
                "job": str(job.get("num", len(rows))),
                "run_name": job.get("run_name", ""),
                # The variant the sweep gave the job (older job lists: the one its run recorded).
                "variant": job.get("variant") or (run.data.tags.get(VARIANT_TAG, "") if run else ""),
                "overrides": " ".join(o for o in job.get("overrides", []) if o not in shared),
                "state": job_state(run, stale_after_s),
                "run_id": run.info.run_id if run else "-",
            }
        )
    return rows


def fingerprint_groups(store: Store, experiment_id: str) -> list[dict[str, Any]]:
    """Without a job list: one pseudo-job per fingerprint seen in the experiment."""
    seen: dict[str, dict[str, Any]] = {}
    for run in store.runs(experiment_id):
        fp = run.data.tags.get(FINGERPRINT_TAG)
        if fp and fp not in seen:
            seen[fp] = {"num": len(seen), "fingerprint": fp, "run_name": run.info.run_name, "overrides": [],
                        "variant": run.data.tags.get(VARIANT_TAG, "")}  # fmt: skip
    return list(seen.values())


def latest_sweep_run(store: Store, experiment_id: str) -> Run | None:
    runs = store.runs_tagged(experiment_id, SWEEP_TAG, "true", most=1)
    return runs[0] if runs else None


def running_sweep(store: Store, experiment_id: str, stale_after_s: float) -> Run | None:
    """A sweep run of the experiment that a live process (not this one) is still running, or None.

    A sweep's run carries the pid and host of its process but no heartbeat of its own: on this host
    the pid says it; elsewhere a fresh heartbeat of one of its jobs does.
    """
    for parent in store.runs(experiment_id, f"tags.`{SWEEP_TAG}` = 'true' and attributes.status = 'RUNNING'"):
        tags = parent.data.tags
        if tags.get(HOST_TAG) == socket.gethostname() and tags.get(PID_TAG, "").isdigit():
            pid = int(tags[PID_TAG])
            if pid != os.getpid() and pid_alive(pid):
                return parent
            continue
        jobs = store.runs_tagged(experiment_id, PARENT_TAG, parent.info.run_id)
        if any(r.info.status == "RUNNING" and is_alive(r, stale_after_s) for r in jobs):
            return parent
    return None
