"""The vocabulary of our MLflow records, written once: tag names, outcome values, MLflow's own keys.

Every writer (the tracker, the sweep callbacks, the bench) and every reader (the sweep decisions,
the report, the status table) names a tag or an outcome through these constants, so a renamed tag
cannot leave a reader looking for the old name. Torch-free and MLflow-free.
"""

from __future__ import annotations

# --- MLflow's own keys ---------------------------------------------------------------------------
NOTE_TAG = "mlflow.note.content"  # a run's (or an experiment's) description in the MLflow UI
RUN_COLOR_TAG = "mlflow.runColor"  # a run's colour in the MLflow UI's table and charts (#rrggbb)
PARENT_TAG = "mlflow.parentRunId"  # MLflow's nesting of a job's run under its sweep's run
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # MLflow 3 opens the experiment on training runs with it

# --- what every training run says about itself -----------------------------------------------
OUTCOME_TAG = "outcome"
NORM_TAG = "norm"  # the variant (conf/norm/<key>.yaml)
NORM_FAMILY_TAG = "norm_family"  # the report groups variants by it
VARIANT_TAG = "variant"  # what the sweep varied, as a label: "torch_layernorm · post" (src.tracking.variants)
VARIANT_AXES_TAG = "variant.axes"  # the swept axes, comma-separated; each value as "variant.<axis>"
MODEL_TAG = "model"
PRECISION_TAG = "precision"
CLUSTER_TAG = "cluster"
SEED_TAG = "seed"
GIT_COMMIT_TAG = "git_commit"
GIT_DIRTY_TAG = "git_dirty"
JOB_NUM_TAG = "hydra_job_num"
RESUMED_TAG = "resumed"
# Steps missing from the run's loss curve for good (`12-14, 20`): lost with a cut-short unsent-metrics file.
MISSING_STEPS_TAG = "missing_steps"

# --- sweep bookkeeping (src.tracking.sweep) ------------------------------------------------------
FINGERPRINT_TAG = "normsweep.fingerprint"
CODE_FINGERPRINT_TAG = "normsweep.code_fingerprint"  # the code that made the run (src.tracking.code)
HEARTBEAT_TAG = "normsweep.heartbeat"  # unix time of the last sign of life
HOST_TAG = "normsweep.host"
PID_TAG = "normsweep.pid"
COMMAND_TAG = "normsweep.command"  # the command that last trained the run (src.core.cli.COMMAND_ENV)
STARTED_TAG = "normsweep.started_at"
SUPERSEDED_TAG = "normsweep.superseded_by"
SWEEP_TAG = "normsweep.sweep"  # "true" on a sweep's parent run (not a training run)
SWEEP_ID_TAG = "normsweep.sweep_id"
SWEEP_COMMAND_TAG = "sweep.command"
SWEEP_JOBS_TAG = "sweep.jobs"  # "3 finished, 1 failed" on a closed sweep run

# --- what a run ran on (src.tracking.environment; the report's setting reads them back) ---------
DEVICE_TAG = "env.device"  # the GPU's model, or the CPU's with its cores and threads
GPU_COUNT_TAG = "env.gpu_count"  # set only where CUDA was available

# --- the `bench-variants` run (src.bench.variants) ----------------------------------------------
# A norm of the user's (`_target_`): where it comes from, and what it was given (src/model/user_norms.py)
NORM_TARGET_TAG = "normsweep.norm.target"  # its import path: my_norms.CenteredRMSNorm
NORM_FILE_TAG = "normsweep.norm.file"  # the file that defines it
NORM_FILE_HASH_TAG = "normsweep.norm.file_sha256"  # that file's bytes: the report's table shows its start
NORM_PACKAGE_TAG = "normsweep.norm.package"  # name==version of the installed distribution it comes from
NORM_PARAMS_TAG = "normsweep.norm.params"  # parameters of one of its norms at the model's width
# The built-in its YAML's `reference` names; absent when it names none (the report then chooses by family).
NORM_REFERENCE_TAG = "normsweep.norm.reference"
NORM_PROJECT_CODE_TAG = "normsweep.norm.project_code"  # the run's code fingerprint without its norm's file
NORM_EPS_TAG = "normsweep.norm.eps"  # the eps it was given, or "not taken" (a different comparison)
NORM_DISPATCH_TAG = "normsweep.norm_dispatch"  # the kernels the run's norm ran: "fwd=fused bwd=composite"
BENCH_TAG = "normsweep.bench"
BENCH_VARIANTS = "variants"  # BENCH_TAG's value on a `python -m src.bench variants` run
BENCH_RUN_NAME = "bench-variants"  # that run's name
SPEED_CHECK_RUN_NAME = "speed-check"  # ...when a sweep ran it, nested under the sweep's run

# A resumed run's training time before this attempt, a final metric beside `train_time_s` (which counts
# every attempt): a command's own training time is the difference (src/launch/time_split.py).
EARLIER_TRAIN_TIME = "earlier_train_time_s"

# --- outcomes: the value of OUTCOME_TAG ----------------------------------------------------------
RUNNING = "running"
FINISHED = "finished"
DIVERGED = "diverged"  # a result, but not a trained model
# Trained through, but a validation or test loss was NaN or infinite (e.g. a norm that breaks only in
# eval mode): a result, as a divergence is, never a finished run with a usable test loss.
EVAL_NOT_FINITE = "eval not finite"
FAILED = "failed"  # an exception escaped
PREEMPTED = "preempted"  # SIGTERM with a checkpoint to resume from
KILLED = "killed"  # Ctrl+C
LOST = "lost"  # RUNNING in MLflow, but its process is gone
INCOMPLETE = "incomplete"  # a sweep run whose jobs did not all produce a result

RESULT_OUTCOMES = (FINISHED, DIVERGED, EVAL_NOT_FINITE)
UNUSABLE_RESULTS = (DIVERGED, EVAL_NOT_FINITE)  # a result without a test loss to compare
INTERRUPTED_OUTCOMES = (PREEMPTED, LOST, KILLED)
RUN_OUTCOMES = (
    FINISHED,
    DIVERGED,
    EVAL_NOT_FINITE,
    FAILED,
    PREEMPTED,
    LOST,
    KILLED,
)  # a training run's, once closed

# MLflow's run status for each outcome.
OUTCOME_STATUS = {
    FINISHED: "FINISHED",
    DIVERGED: "FAILED",
    EVAL_NOT_FINITE: "FAILED",
    FAILED: "FAILED",
    KILLED: "KILLED",
    PREEMPTED: "KILLED",
}
