"""Hydra callbacks that bracket a multirun: the sweep's parent run in MLflow, and its end.

A sweep is one MLflow parent run with every job nested under it (`mlflow.parentRunId`). The parent
holds the sweep's definition (the command, the sweeper's lists, each job's overrides and
fingerprint), so `python -m src.report --status` can name the jobs that never started. Its identity
is the experiment plus its jobs' fingerprints: re-running the identical command reopens the same
parent instead of adding one. Creating it also creates the store and experiment before any job.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from src.core.memory_peak import collection_held
from src.core.paths import ConfigError, register_resolvers
from src.core.terminal import say

PARENT_WAIT_S = 60.0  # another copy of the sweep holds the claim on its parent run: wait this long for it

if TYPE_CHECKING:
    from src.tracking.store import Store
    from src.tracking.variants import Variants
    from src.training.run_spec import CheckedJob


def _parsed_overrides(config: DictConfig) -> list[Any]:
    """The sweep's overrides as Hydra's parser reads them (the sequential sweeper's: its first round)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from src.launch.sequential import first_round_overrides

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    # The sequential sweeper chooses the seeds: its job list is the first round's.
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task) + first_round_overrides(config)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    return parser.parse_overrides(arguments)


def _job_overrides(parsed: list[Any]) -> list[list[str]]:
    from src.core.overrides import job_overrides

    return job_overrides(parsed)


def refuse_empty_sweep(config: DictConfig) -> None:
    """Stop a sweep of zero jobs (`norm='glob(zzz*)'`, `range(0,0)`) before anything is recorded,
    naming the overrides that expand to nothing; Hydra would launch nothing and exit 0."""
    try:
        parsed = _parsed_overrides(config)
        if _job_overrides(parsed):
            return
    except Exception:  # a bad sweep setting: reported below, where the job list is built (sweep_jobs)
        return
    empty = [o.input_line for o in parsed if o.is_sweep_override() and not list(o.sweep_string_iterator())]
    where = ", ".join(empty) or "the sweep's overrides"
    raise SystemExit(
        f"config error: {where}: the sweep has no jobs ({'it expands' if len(empty) < 2 else 'they expand'} to no "
        "value; a glob matches the names in the group's folder, e.g. norm='glob(*rms*)'); nothing was recorded"
    )


# The code each job of the sweep runs (config fingerprint -> CodeState), as `sweep_jobs` resolved them:
# the project's, and for a norm of the user's its file beside it.
job_code: dict[str, Any] = {}


def sweep_jobs(config: DictConfig) -> tuple[list[dict[str, Any]], Variants, list[tuple[DictConfig, CheckedJob]]]:
    """Every job of the sweep as the basic sweeper will launch it (the sequential one: its first round):
    overrides, run name, fingerprint, and its variant (what the jobs' configs differ in, seed aside),
    with each job's composed config and its `check_job`. Each config's values, paths and files are
    checked as it is composed: a refusal the jobs share answers at the first job, whatever the sweep's
    size (composing a job takes ~0.1-0.2 s: a store path refused after all of them took 20 s at 100
    jobs). What needs the model (torch) is `resolve_jobs`, once the report's settings passed too."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from src.core.compositions import install, job_config
    from src.core.paths import compose_error_line
    from src.tracking.variants import find_variants
    from src.training.run_spec import check_job

    here = not config.cluster.get("spans_machines", False)
    install()  # each job composed here once; Hydra's sweeper and launcher reuse it
    jobs, params, configs = [], {}, []
    for overrides in _job_overrides(_parsed_overrides(config)):
        try:
            cfg = job_config(config, overrides)
        except (HydraException, OmegaConfBaseException) as err:  # `foo=1,2`: as `src.train` says it
            raise ConfigError(compose_error_line(err)) from None
        checked = check_job(cfg, trains_here=here)  # a job that would be refused: no sweep run is recorded for it
        identity = checked.identity  # the config's identity, its flat params and fingerprint, made once
        params[str(len(jobs))] = identity.params
        jobs.append({"num": len(jobs), "overrides": list(overrides), "run_name": cfg.run_name, "fingerprint": identity.fingerprint})
        configs.append((cfg, checked))
    variants = find_variants(params)
    for job in jobs:
        job["variant"] = variants.labels[str(job["num"])]
    return jobs, variants, configs


def resolve_jobs(config: DictConfig, jobs: list[dict[str, Any]], configs: list[tuple[DictConfig, CheckedJob]]) -> None:
    """Each job checked as it will train, past its `check_job` (src.training.run_spec.check_model: the
    norm, the model's size, the memory it needs); the code each runs kept in `job_code`."""
    from src.tracking.code import code_state
    from src.training.run_spec import check_model, with_norm_code

    here = not config.cluster.get("spans_machines", False)
    job_code.clear()
    for job, (cfg, checked) in zip(jobs, configs, strict=True):
        model, _ = check_model(cfg, checked, trains_here=here)
        job_code[job["fingerprint"]] = with_norm_code(code_state(), model)  # a norm of the user's: its file joins it


# What a SLURM launcher runs on this machine: sbatch submits; submitit looks for srun before it submits
# anything, and each job's tasks are started by it.
SLURM_COMMANDS = ("sbatch", "srun")


def check_scheduler(config: DictConfig) -> None:
    """A sweep that submits to SLURM needs SLURM's commands here, and a partition its jobs fit in:
    ConfigError, before the store is opened or the sweep recorded (submitit found the commands missing,
    and sbatch the partition unknown, only once the sweep's run existed)."""
    import shutil

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if "slurm" not in target.rsplit(".", 1)[-1].lower():
        return
    missing = [name for name in SLURM_COMMANDS if shutil.which(name) is None]
    if missing:
        chosen = "cluster=slurm" if OmegaConf.select(config, "cluster.name", default=None) == "slurm" else "hydra/launcher"
        raise ConfigError(
            f"{chosen}: no {' or '.join(missing)} on PATH: this machine cannot submit to SLURM; run the sweep "
            "from the cluster's login node, or choose a cluster that trains here (e.g. cluster=cpu_pool); "
            "nothing was recorded"
        )
    from src.launch.slurm_partition import check_partition

    check_partition(config)  # a partition that does not exist, or that no job of the sweep fits in


def check_hydra_folder(folder: Path, key: str) -> None:
    """Hydra's output folder (`hydra.run.dir`, `hydra.sweep.dir`) must be writable: ConfigError naming `key`."""
    from src.core.paths import require_writable

    require_writable(folder, key, f"Hydra writes each job's config and log there: point {key} at a writable folder")


def warn_unread_keys(jobs: list[dict[str, Any]]) -> None:
    """Warn (never stop: identical jobs can be meant) about swept keys that no code reads."""
    from src.launch.unread_keys import unread_swept_keys, unread_warning

    unread = unread_swept_keys(jobs)
    if unread:
        say(unread_warning(unread, len(jobs)), sys.stderr)


def _report_settings(config: DictConfig) -> dict[str, Any] | None:
    report_cfg = OmegaConf.select(config, "report", default=None)
    return OmegaConf.to_container(report_cfg, resolve=True) if report_cfg else None  # type: ignore[return-value]


def check_report_settings(config: DictConfig) -> None:
    """The report's settings as the sweep-end report reads them (`report.margin.*`, `report.pairs`,
    the claims files): the sweep's own, checked before its jobs are composed, in one line, since the
    report is made only after the whole sweep has trained."""
    from hydra.core.hydra_config import HydraConfig

    from src.report.read.settings import report_settings

    # A user's claims files are found in the sweep's own config folders (`--config-dir`,
    # src.core.paths.user_config_dirs), which Hydra names in a config it has not set yet.
    hydra_config = HydraConfig.instance()
    before = hydra_config.cfg
    if before is None:
        hydra_config.set_config(config)
    try:
        # The margins (> 0), the pairs, the reference's form (its values are the jobs': check_reference)
        # and the claims files, each read and checked.
        report_settings(_report_settings(config))
    except ConfigError as err:
        raise SystemExit(f"config error: {err}") from None
    finally:
        hydra_config.cfg = before


def check_reference(config: DictConfig, variants: Variants) -> None:
    """`report.reference` naming values the sweep has: checked once every job is composed."""
    from src.report.read.settings import reference_setting, reference_values

    try:
        reference = reference_setting(_report_settings(config))
        reference_values(reference, {a.name: variants.values(a.name) for a in variants.axes})
    except ConfigError as err:
        raise SystemExit(f"config error: {err}") from None


def stop_on_code_change(store: Store, experiment_id: str, jobs: list[dict[str, Any]], config: DictConfig) -> None:
    """Before the first job trains: stop, in one line naming them all, if jobs would reuse or resume
    runs that other code made (each job's own decision, `run_plan.decide_job`, is the same rule, one run at
    a time: it would stop only after the jobs before it had trained)."""
    sw = config.sweep
    if not jobs or sw.on_existing != "resume" or sw.on_code_change != "fail":
        return
    from src.tracking import sweep

    # Which checkpoint belongs to which run is read job by job; here, with checkpoints on, an
    # interrupted run counts as one a job would resume.
    found = sweep.code_conflicts(
        store, experiment_id, [j["fingerprint"] for j in jobs], job_code, float(sw.stale_after_s),
        lambda run: bool(config.checkpoint.enabled),
    )  # fmt: skip
    if found:
        raise SystemExit(f"config error: {sweep.code_change_message(store, found, job_code)}")


def _claim_parent(store: Any, experiment_id: str, sweep_id: str, stale_after_s: float) -> tuple[Any, list[Any]]:
    """(this process's claim on creating the parent, or None; the parent runs already there).

    Without the claim, two copies started at once would each create a parent run, and each copy's
    jobs and report would land under a different one."""
    from src.tracking.sweep import take_lock
    from src.tracking.tags import SWEEP_ID_TAG

    deadline = time.monotonic() + PARENT_WAIT_S
    while True:
        held, _ = take_lock(store, experiment_id, f"sweep-{sweep_id}", stale_after_s)
        found = store.runs_tagged(experiment_id, SWEEP_ID_TAG, sweep_id, most=1)
        if held is not None or found or time.monotonic() > deadline:
            return held, found
        time.sleep(0.5)  # the other copy is creating it



def sweep_command(config: DictConfig) -> str:
    """The sweep's command as a user re-runs it from the repository: their PYTHONPATH (where a norm of
    theirs is imported from) as an environment prefix, `--config-dir` (where its YAML is found), the
    Hydra overrides they typed (`hydra.sweep.dir=...`, `hydra.searchpath=...`; not `hydra.mode`, which
    `-m` sets) and the task's. Without the first two, the recorded command of a sweep of a user's norm
    stopped on `norm: no option ...`."""
    from hydra.core.hydra_config import HydraConfig

    folders = [str(s.path) for s in HydraConfig.get().runtime.config_sources if s.provider == "command-line"] if HydraConfig.initialized() else []
    typed = [o for o in config.hydra.overrides.hydra if not str(o).startswith("hydra.mode=")]
    args = [*(a for folder in folders for a in ("--config-dir", folder)), *map(str, typed), *map(str, config.hydra.overrides.task)]
    env = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    return env + "python -m src.train -m " + " ".join(shlex.quote(a) for a in args)

class MlflowSetup(Callback):
    """Open (or reopen) the sweep's parent run before any job starts; close it when the sweep ends.

    The store is checked first, as each job checks it (src.tracking.store): a URI with credentials,
    a database path that is a folder, or a server that does not answer stops the sweep within
    seconds, before any job starts. Each job opens the store again under its lock, which also
    protects processes this callback never sees (a second terminal, torchrun ranks, SLURM tasks).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Its checks import torch and MLflow's store, and compose every job's config, which the sweep
        # keeps to launch them (src/core/compositions.py): made once, set aside from later collections.
        with collection_held(set_aside=True):
            self._start(config)

    def _start(self, config: DictConfig) -> None:
        register_resolvers()
        refuse_empty_sweep(config)  # with or without tracking: Hydra would end a sweep of nothing with 0
        if int(os.environ.get("RANK", "0")) != 0:
            return
        from src.tracking.variants import find_variants

        try:  # every job's config, the sweeper's and the report's settings, before Hydra launches job 0
            check_scheduler(config)  # seconds, and before the store: a sweep SLURM cannot take records nothing
            check_hydra_folder(Path(str(config.hydra.sweep.dir)), "hydra.sweep.dir")  # Hydra makes it after this callback
            check_report_settings(config)
            if config.logger.enabled:  # what the sweep writes at its start and at its end
                from src.training.run_spec import check_artifact_location, check_report_folder

                check_artifact_location(config.logger.get("artifact_location"))
                check_report_folder(config)
            jobs, variants, configs = sweep_jobs(config)  # each checked as it is composed
            warn_unread_keys(jobs)  # before training: a swept key nothing reads makes identical jobs
            check_reference(config, variants)
            resolve_jobs(config, jobs, configs)  # last: the norms' checks import torch
        except ConfigError as err:  # Hydra turns a callback's exception into a warning: stop here instead
            raise SystemExit(f"config error: {err}") from None
        except Exception as err:  # another sweeper plugin: no job list, status groups runs instead
            say(f"[normsweep] note: sweep job list unavailable ({type(err).__name__}: {err})", sys.stderr)
            jobs, variants = [], find_variants({})
        if not config.logger.enabled:
            return
        from src.tracking import sweep
        from src.tracking.code import code_state
        from src.tracking.git import git_state
        from src.tracking.server_client import ServerLost
        from src.tracking.store import Store
        from src.tracking.store_uri import StoreError, redact_text
        from src.tracking.summary import log_sweep_definition
        from src.tracking.tags import (
            NOTE_TAG,
            OUTCOME_TAG,
            RUNNING,
            SWEEP_COMMAND_TAG,
            SWEEP_ID_TAG,
            SWEEP_TAG,
        )
        from src.tracking.ui_view import publish_view
        from src.tracking.variants import AXES_ENV, axes_to_env
        from src.training.run_spec import check_store_placement

        try:  # before the launcher submits anything
            check_store_placement(config)
        except ConfigError as err:
            raise SystemExit(f"config error: {err}") from None
        try:
            store = Store.connect(config.logger.tracking_uri)
        except StoreError as err:  # Hydra turns an Exception here into a warning: stop the sweep instead
            raise SystemExit(f"config error: {err}") from None
        except ServerLost as err:  # the server's database is down: a fault, not a config error
            raise SystemExit(f"error: {err}") from None
        # Each job records its variant from these axes (src.train), whatever process runs it.
        os.environ[AXES_ENV] = axes_to_env(variants.axes)
        experiment_id = store.experiment_id(config.experiment_name, config.logger.artifact_location)
        stop_on_code_change(store, experiment_id, jobs, config)
        key = config.experiment_name + "".join(sorted(j["fingerprint"] for j in jobs)) if jobs else os.urandom(8).hex()
        sweep_id = hashlib.sha256(key.encode()).hexdigest()[:16]
        publish_view(store, experiment_id)  # what the links printed for this sweep open on
        # Credentials in a tracking URI never reach MLflow (they are refused anyway; redacting is cheap).
        command = redact_text(sweep_command(config))
        # A copy of the same sweep started at the same time (another node) shares one parent run.
        held, found = _claim_parent(store, experiment_id, sweep_id, float(config.sweep.stale_after_s))
        if found:
            if held is not None:
                held.release()
            run_id = found[0].info.run_id
        else:
            run_id = store.create_run(
                experiment_id,
                f"sweep-{config.experiment_name}",
                {
                    SWEEP_TAG: "true",
                    SWEEP_ID_TAG: sweep_id,
                    OUTCOME_TAG: RUNNING,
                    **git_state().tags(),
                    NOTE_TAG: f"Sweep of {len(jobs)} jobs: `{command}`. Its jobs are nested below it.",
                },
            )
            if held is not None:
                held.release()
        # The jobs (in this process or launched from it) nest under it: set before anything else is
        # written, so a failed write below (Hydra makes it a warning) cannot leave them unnested.
        os.environ[sweep.PARENT_ENV] = run_id
        if found:
            store.reopen(run_id)
            store.set_tags(run_id, {OUTCOME_TAG: RUNNING})
        else:
            log_sweep_definition(store, run_id, jobs)
        store.set_tags(run_id, {SWEEP_COMMAND_TAG: command, **code_state().tags()})  # the code deciding this time
        definition = sweep.sweep_definition(config.experiment_name, command, run_id, jobs)
        store.log_text(run_id, definition, sweep.JOBS_ARTIFACT)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / sweep.JOBS_FILE).write_text(definition)
        from src.launch.sweep_end import open_parent

        open_parent(store, run_id, float(config.sweep.stale_after_s))  # closed on every exit path
        say(f"[normsweep] sweep run {run_id}: {len(jobs)} jobs; re-run the same command to finish what is left")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        from src.launch import sweep_end

        # A single run (no -m) has no sweep to tell, and no hydra.job.num to name it by.
        if job_return.status == JobStatus.FAILED and sweep_end.armed() is not None:
            err = sweep_end.returned(job_return)  # the exception, not raised
            sweep_end.job_failed(f"{sweep_end.describe_job(config)} failed: {type(err).__name__}: {err}")
        sweep_end.without_hydra_line(job_return)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from src.launch import sweep_end
        from src.tracking import sweep
        from src.tracking.variants import AXES_ENV

        os.environ.pop(sweep.PARENT_ENV, None)
        os.environ.pop(AXES_ENV, None)
        parent = sweep_end.armed()
        if parent is not None:
            # Another copy of the sweep still trains some of its jobs: that copy, the last to end,
            # closes the shared sweep run with every job's result; closing it here would say incomplete.
            if not sweep_end.still_running_elsewhere():
                parent.close_at_end()
            sweep_end.disarm()
