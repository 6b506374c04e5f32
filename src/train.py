"""Train one GPT-2 with one normalization variant: `python -m src.train norm=hand_rmsnorm`.

Flow: the config resolved once -> the run's plan (skip, resume or new) -> data and model -> Trainer.fit
(the data prepared, the MLflow run opened, then trained) -> test -> the run's result, closed in MLflow.
A sweep is a Hydra multirun: `python -m src.train -m norm='glob(*)'` or `-m experiment=norm_sweep`.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import hydra
from omegaconf import DictConfig, OmegaConf

from src.core import cli, compositions
from src.core.interrupts import exit_quietly_after_ctrl_c
from src.core.memory_peak import collection_held, release_garbage, set_imports_aside
from src.core.paths import refuse_misread_overrides, register_resolvers
from src.core.terminal import say
from src.launch.sweep_end import RESULT_AWAITED_ENV, JobFailed, job_failed
from src.launch.time_split import mark_command_start
from src.tracking.store_uri import refuse_credentials, sqlite_path

if TYPE_CHECKING:
    from src.tracking.record import RunResult
    from src.training.failures import Ending

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> RunResult:
    """Resolve, plan, build, fit, test and finish one run. Raises ConfigError before anything is recorded."""
    # Imported here, not above, each when first needed: what Hydra refuses (a misspelt key, --help) is
    # answered without torch, and what the config check refuses without Lightning or MLflow. Every
    # launcher's job comes through here, whatever process it runs in: the heavy imports load with the
    # collector held (src/core/memory_peak.py).
    with collection_held():
        from src.training.run_spec import resolve

        spec = resolve(cfg)  # checked once, with the model's size and the token budget
        import lightning as L
        from lightning.pytorch.utilities import rank_zero_only

        from src.training.lit_module import GPTLitModule
        from src.training.run_life import RunLife, build_trainer, run_datamodule
    set_imports_aside()  # once per process, before the job makes anything of its own that would stay with them
    with collection_held():  # MLflow's store loads as the store opens
        life = RunLife.plan(spec)  # done / resume / settle / supersede / new, decided once per job
    if life.done is not None:
        return life.done
    run, ck = spec.train, spec.checkpoint
    with life:  # closed with its outcome however the fit ends (its MLflow run opens as the fit sets up)
        datamodule = run_datamodule(run, spec.budget, spec.seed)  # Lightning prepares it, first in the fit
        L.seed_everything(spec.seed, workers=True, verbose=False)  # the same initial weights and data order for every variant
        module = GPTLitModule(spec.model, run.optim, spec.budget, run.log_every_n_steps, compile=run.compile)
        trainer = build_trainer(run, spec.devices, spec.budget, life.callbacks(), ck.folder, ck.enabled)
        trainer.fit(module, datamodule=datamodule, ckpt_path=life.ckpt_path, weights_only=True)
        if not life.diverged:
            if ck.enabled:
                trainer.save_checkpoint(ck.last, weights_only=False)  # the end state (all of it: a resume reads it)
            trainer.test(module, datamodule=datamodule, verbose=False)
        result = life.finish(trainer, module)
    if rank_zero_only.rank == 0:  # one line per job, not one per process (the Trainer set the rank)
        say(result.summary())
    return result


_task_started = False  # Hydra composed a config and called main: a refusal before it is Hydra's (src.core.cli)


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    global _task_started
    _task_started = True
    note = single_run_of_a_sweep(cfg)
    if note:
        say(f"[normsweep] note: {note}")
    try:
        result = train(cfg)
    except Exception as err:  # in one line (src/training/failures.py), ended as the line says
        from src.training.failures import job_ending

        db = lambda: sqlite_path(str(cfg.logger.tracking_uri)) if cfg.logger.enabled else None  # noqa: E731
        end_job(job_ending(err, cfg.get("run_name", "?"), db), cfg.get("run_name", "?"))
    if cli.in_multirun():  # before the next job of a sequential multirun, which shares this process
        release_garbage()
    # Hydra sweepers that optimise read this return value.
    return result.test_loss


def single_run_of_a_sweep(cfg: DictConfig) -> str | None:
    """What a command without -m leaves out of the sweep its preset defines (`experiment=norm_sweep`
    sweeps the norm through `hydra.sweeper.params`, which Hydra reads under -m alone): one line, on
    the first process only, so that one run is not mistaken for the study's sweep."""
    from hydra.core.hydra_config import HydraConfig

    ranked = os.environ.get("RANK", "0") != "0" or os.environ.get("LOCAL_RANK", "0") != "0"
    if not HydraConfig.initialized() or cli.in_multirun() or ranked:
        return None
    hydra_cfg = HydraConfig.get()
    params = hydra_cfg.sweeper.get("params") or {}
    if not params:
        return None
    swept = ", ".join(f"{key}={value}" for key, value in params.items())
    choices = hydra_cfg.runtime.choices  # a config group's option by its name (norm=torch_layernorm)
    chosen = ", ".join(f"{key}={choices.get(key) or OmegaConf.select(cfg, str(key), default='?')}" for key in params)
    return f"this config sweeps {swept} (hydra.sweeper.params) under -m; without -m this is one run, {chosen}: add -m for the sweep"


def end_job(ending: Ending, run_name: str) -> NoReturn:
    """Stop with the ending's line alone: a refusal ends the command; after a failed run a sweep's other
    jobs still run (Hydra ends the sweep with the line) unless the store they all write to broke."""
    if ending.how == "peer":
        raise JobFailed(ending.line) from None
    if ending.how == "refused":
        job_failed(f"{run_name}: {ending.line}")  # the sweep's parent run records why it ended
        if cli.in_multirun() and os.environ.get(RESULT_AWAITED_ENV):  # a launcher waits for this job's result
            raise JobFailed(ending.line) from None
        raise SystemExit(ending.line) from None
    if cli.in_multirun() and not ending.store_broken:
        say(f"[normsweep] {ending.line}", sys.stderr)
        raise JobFailed(ending.line)  # Hydra's on_job_end tells the sweep's parent run
    job_failed(ending.line)  # the sweep's parent run records why it ended
    raise SystemExit(ending.line)


def run_command_line() -> None:
    """`main` with Hydra's own refusals (a value of the wrong type, an unknown option, a bad override)
    in one `config error:` line naming the key, as every other refusal; Hydra would print several."""
    exit_quietly_after_ctrl_c()  # a run's second Ctrl+C never cuts the command's exit short
    if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the user asked for Hydra's traceback
        main()
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors instead of printing them
    try:
        main()
    except JobFailed as err:  # a sweep job's line, printed as Hydra prints it
        raise SystemExit(str(err)) from None
    except cli.CONFIG_ERRORS as err:  # Hydra's, OmegaConf's, or a sweeper's before any job ran
        raise SystemExit(cli.refusal_line(err)) from None
    except OSError as err:  # Hydra's own output folder (a job's errors are its own lines, in main)
        from src.launch.callbacks import check_hydra_folder

        key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(sys.argv[1:]) else "hydra.run.dir"
        try:
            check_hydra_folder(Path(err.filename or "."), key)
        except cli.CONFIG_ERRORS as refused:
            raise SystemExit(cli.refusal_line(refused)) from None
        raise SystemExit(f"config error: {key}: {err.filename}: {err.strerror}") from None


register_resolvers()  # before Hydra composes: paths use ${project_root:}
compositions.install()  # each config composed once in this process (src/core/compositions.py)
mark_command_start()  # a sweep's last line says where its time went (src/launch/time_split.py)


def hydra_argv(argv: list[str]) -> list[str]:
    """The command line in the order Hydra reads it: its options, then the overrides. Hydra's parser
    takes no option after an override (`norm=x -m seed=0,1` is "unrecognized arguments: norm=x
    seed=0,1"); every other command here takes them in any order, and so does this one. An option
    Hydra lacks (`--bogus-opt`) is the one `config error:` line every refusal is, not argparse's
    8-line usage block; an override Hydra would misread (`norm=[a,b]`) raises ConfigError
    (src.core.paths.refuse_misread_overrides). On a Hydra other than the one this was written for, the
    command line goes to Hydra as typed (src/core/patches.py)."""
    from src.core.patches import hydra_options_parser

    hydra_parser = hydra_options_parser()
    if hydra_parser is None:
        return list(argv)
    hydra_parser.error = lambda message: cli.exit_with(cli.usage_error("python -m src.train", message))  # type: ignore[method-assign]
    overrides = list(hydra_parser.parse_intermixed_args(argv).overrides)
    options = list(argv)
    for override in overrides:
        options.remove(override)
    refuse_misread_overrides(overrides)  # before a sweep's run is recorded: Hydra would take these
    return [*options, *overrides]


def command() -> None:
    refuse_credentials(sys.argv[1:])  # before Hydra writes the command line into .hydra/ and multirun.yaml
    try:
        sys.argv[1:] = hydra_argv(sys.argv[1:])
    except cli.CONFIG_ERRORS as err:
        raise SystemExit(cli.refusal_line(err)) from None
    try:
        run_command_line()
    except SystemExit as exit_:
        if exit_.code in (None, 0) and {"-h", "--help"} & set(sys.argv[1:]):  # Hydra's help, then ours
            print(cli.EPILOG, flush=True)
        raise


if __name__ == "__main__":
    mark_command_start(new=True)  # a command of its own, whatever started it
    sys.exit(cli.hydra_status(command, lambda: _task_started, multirun=bool({"-m", "--multirun"} & set(sys.argv[1:]))))
