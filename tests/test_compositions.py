"""Each job's config is composed once (src/core/compositions.py), and the memo changes no config.

The memo patches Hydra's config loader for the whole process, and importing src.train installs it:
the comparisons with Hydra's own composition run in a fresh interpreter, the plain pass first.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAST, REPO, cli_env, training_runs, unwrapped

# A fresh interpreter composes every job of each sweep with Hydra as it is, then with the memo
# installed, twice (the second time from the memo), and prints the three lists as YAML.
COMPARE = r"""
import json, sys
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from src.core import compositions
from src.core.paths import hydra_initialized, register_resolvers

register_resolvers()
sweeps = json.loads(sys.argv[1])

def jobs(overrides):
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("train", overrides["shared"], RunMode.MULTIRUN)
    made = []
    for job in overrides["jobs"]:
        cfg = compositions.job_config(master, [*overrides["shared"], *job], loader)
        full = loader.load_sweep_config(master, [*overrides["shared"], *job])
        made.append(OmegaConf.to_yaml(cfg) + OmegaConf.to_yaml(full.hydra, resolve=False))
    return made

out = {}
with hydra_initialized():
    out["plain"] = [jobs(s) for s in sweeps]
    compositions.install()
    out["first"] = [jobs(s) for s in sweeps]
    out["again"] = [jobs(s) for s in sweeps]
print(json.dumps(out))
"""

SWEEPS = [
    # one group choice, values apart: the defaults tree is walked once for all of them
    {"shared": ["model.n_layers=1"], "jobs": [["seed=0"], ["seed=1"], ["seed=2", "optim.lr=1e-3"]]},
    # group choices apart: a tree per choice, and a preset that sets other groups
    {"shared": [], "jobs": [["norm=hand_rmsnorm"], ["norm=no_norm", "seed=1"], ["experiment=norm_sweep", "norm=dyt"]]},
    # a key that resolvers read: each job's folders follow its own root, never another job's
    {"shared": ["seed=3"], "jobs": [["paths.root_dir=/tmp/a"], ["paths.root_dir=/tmp/b"], ["++model.drop_rate=0.1"]]},
    # the study preset, which takes the study's attention, data order and scored weights, and each set back
    {"shared": ["experiment=gpt2_small_study"], "jobs": [[], ["model.attention=sdpa", "data.order=drawn"], ["test_weights=final"]]},
]


@pytest.mark.slow  # a fresh interpreter that composes 36 configs
def test_remembered_compositions_equal_hydras_own() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", COMPARE, json.dumps(SWEEPS)], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["first"] == out["plain"]
    assert out["again"] == out["plain"]
    roots = out["plain"][2]
    assert "cache_dir: /tmp/a/.cache/data" in roots[0] and "cache_dir: /tmp/b/.cache/data" in roots[1]
    assert "norm_type: dyt" in out["plain"][1][2] and "norm_type: no_norm" in out["plain"][1][1]
    study, back, final = out["plain"][3]
    assert all(f"  {line}\n" in study for line in ("attention: explicit", "order: in_order")) and "test_weights: best_train_loss" in study
    assert "  attention: sdpa\n" in back and "  order: drawn\n" in back and "test_weights: best_train_loss" in back
    assert "test_weights: final" in final and "  attention: explicit\n" in final


# Hydra's loader counted: each full composition (`_load_configuration_impl`) adds one to `loads`.
COUNTED = r"""
from hydra._internal.config_loader_impl import ConfigLoaderImpl

loads = []
compose = ConfigLoaderImpl._load_configuration_impl
def counted(self, *args, **kwargs):
    loads.append(1)
    return compose(self, *args, **kwargs)
ConfigLoaderImpl._load_configuration_impl = counted
"""
# `python -m src.train` with its compositions counted, the count printed as the process exits; and the
# objects each job's garbage collection scans (those gc tracks outside its frozen generation), the most.
COUNT = r"""
import atexit, gc, runpy, sys
""" + COUNTED + r"""atexit.register(lambda: print(f"config loads: {len(loads)}", file=sys.stderr))
from src.core import memory_peak
scanned, release = [], memory_peak.release_garbage
memory_peak.release_garbage = lambda: (scanned.append(len(gc.get_objects())), release())[1]
atexit.register(lambda: print(f"objects scanned: {max(scanned)}", file=sys.stderr))
full = []  # the objects each full collection of the process's whole life scans
gc.callbacks.append(lambda phase, info: full.append(len(gc.get_objects(2))) if phase == "start" and info["generation"] == 2 else None)
atexit.register(lambda: print(f"largest full collection: {max(full, default=0)}", file=sys.stderr))
sys.argv = ["src.train", *sys.argv[1:]]
runpy.run_module("src.train", run_name="__main__")
"""


@pytest.mark.slow  # a real 6-job sweep
def test_a_six_job_sweep_loads_its_config_at_most_eight_times(
    tiny_overrides: list[str], tmp_path: Path, store: dict[str, str]
) -> None:
    """Hydra's own composition of the sweep and of each job, and the report's study preset: before,
    21 loads (each job composed again by the checks before launch and by Hydra's sweeper). Six
    identical jobs in one process each record their own peak memory, and the process does not grow
    job after job (before: 786, 831, 876, 934, 979, 1017 MB, the process's running peak)."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNT, "-m", *tiny_overrides, *FAST, "optim.max_steps=1", "seed=0,1,2,3,4,5"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(" ok | ") == 6, proc.stdout[-3000:]
    loads = int(proc.stderr.rpartition("config loads: ")[2].split()[0])
    assert loads <= 8, proc.stderr[-2000:]
    # The imports (~680,000 objects) are set aside before the first job's fit: no job's collection
    # scans them again (before: the first job's scanned ~690,000, 0.3 s of CPU; later ones ~5,000).
    scanned = int(proc.stderr.rpartition("objects scanned: ")[2].split()[0])
    assert scanned < 100_000, proc.stderr[-2000:]
    # Nor does any collection while they load: the collector is held through the sweep's start checks
    # and a job's imports (before: a full collection each time they grew by a quarter, the last of
    # ~620,000 objects; 1.5 s of a tiny run's 12 s of CPU in collections).
    largest = int(proc.stderr.rpartition("largest full collection: ")[2].split()[0])
    assert largest < 100_000, proc.stderr[-2000:]
    # ...and its last line says where its time went, from the jobs' recorded training time
    split = [line for line in proc.stdout.splitlines() if line.startswith("[normsweep] where the time went: ")]
    assert len(split) == 1 and "training " in split[0] and "the rest " in split[0], proc.stdout[-2000:]

    from mlflow.tracking import MlflowClient

    from src.core.memory_peak import JOB_PEAK, PROCESS_PEAK

    runs = sorted(training_runs(MlflowClient(store["uri"]), "normsweep"), key=lambda r: r.info.start_time)
    peaks = [r.data.metrics[JOB_PEAK] for r in runs]
    assert len(peaks) == 6 and not any(PROCESS_PEAK in r.data.metrics for r in runs), [r.data.metrics for r in runs]
    # Each job's own peak starts from the resident size the job found (clear_refs), so what the process
    # kept job after job would show here as a climb: the peaks' trend in job order is the bound on the
    # growth. (The process's lifetime peak is not: the sweep's end, after the jobs, is not a job's.)
    # A process that kept each job's leftovers grew ~47 MB a job (792 -> 1,120 MB over 8 jobs); with
    # 4 KiB pages identical jobs' peaks spread up to 8% without a trend (732-789 MB, the heap laid out
    # differently from job to job), so the trend is read, not the spread: its slope's standard error
    # is ~4 MB a job at that spread, the bound ~11.
    slope = statistics.linear_regression(range(len(peaks)), peaks).slope
    assert slope < 0.015 * statistics.fmean(peaks) and max(peaks) <= 1.12 * min(peaks), (slope, peaks)


def test_the_time_split_adds_up() -> None:
    from src.launch.time_split import split_line

    line = split_line(training_s=85.0, measuring_s=10.0, wall_s=100.0, resumed=False)
    assert "100 s in all: training 85 s (85%), the speed check 10 s (10%), the rest 5 s (5%" in line
    assert "training at most 30 s" in split_line(30.0, 0.0, 40.0, resumed=True)
    assert "speed check" not in split_line(30.0, 0.0, 40.0, resumed=False)
    resumed = split_line(12.0, 0.0, 40.0, resumed=False, earlier_s=68.0)  # this command's own, the earlier apart
    assert "training 12 s (30%) (and 68 s in earlier attempts of resumed jobs), the rest 28 s (70%)" in resumed
    # Two pool workers' training adds up past the wall time: said as a sum, never as 170% of it.
    pooled = split_line(4709.0, 0.0, 2778.0, resumed=False)
    assert "the jobs' training 4,709 s summed over jobs that ran at once" in pooled and "%" not in pooled


# Every refusal that a config, a path or a file decides (docs/faults.md's tables), answered before the
# heavy libraries are imported: one interpreter runs them all through the entry point, one after
# another, and names after each the heavy modules imported so far (the first to import one is named).
HEAVY = ("torch", "lightning", "mlflow", "pandas", "scipy", "matplotlib")
REFUSALS = r"""
import json, os, runpy, sys

HEAVY = json.loads(sys.argv[2])
for n, case in enumerate(json.loads(sys.argv[1])):
    saved = dict(os.environ)
    os.environ.update(case["env"])
    os.environ["HYDRA_FULL_ERROR"] = "0"  # the entry point sets it to 1 for its own run
    sys.argv = ["src.train", *case["argv"]]
    print(f"--- case {n}", file=sys.stderr, flush=True)
    try:
        runpy.run_module("src.train", run_name="__main__")
    except SystemExit as exit_:
        print(f"exit {exit_.code}", file=sys.stderr, flush=True)
    os.environ.clear()
    os.environ.update(saved)
    print("heavy:", ",".join(m for m in HEAVY if m in sys.modules), file=sys.stderr, flush=True)
"""
SWEEP = ["-m", "norm=hand_layernorm,torch_layernorm"]
# Refused for what this machine or the installed packages say, not the config alone, so torch or
# Lightning is asked (and imported) first, as before: a GPU on a machine without one (torch.cuda);
# `cluster.strategy=bogus` / `cluster.accelerator=bogus` (the choices are Lightning's registries); a
# norm's options (its layers are built on the meta device); the token cache's folder and FineWeb's
# `datasets` package (the data stage, as Lightning prepares the data); a checkpoint in the folder of
# a new single run (whose run it is: the store says).
REFUSED: dict[str, tuple[list[str], str]] = {
    "lr": (["optim.lr=-1"], "config error: optim.lr:"),
    "seed_type": (["seed=abc"], "config error: seed:"),
    "seed_range": (["seed=-1"], "config error: seed: must be an integer in [0, 4294967295], got -1"),
    "norm": (["norm=nope"], "config error: norm"),
    "appended_key": (["+optim.lrr=1"], "config error: optim.lrr:"),
    "misspelt_key": (["optim.lrr=1"], "config error: optim.lrr: no such key; did you mean optim.lr?"),
    "misspelt_group_key": (["data.folder=x"], "config error: data.folder:"),
    "misspelt_margin": (["report.margin.tst_loss=1"], "config error: report.margin.tst_loss:"),
    "unknown_key": (["foo=1"], "config error: foo:"),
    "devices": (["cluster.devices=0"], "config error: cluster.devices:"),
    "devices_type": (["cluster.devices=1.5"], "config error: cluster.devices: 1.5 is not an integer"),
    "workers_type": (["cluster=cpu_pool", "cluster.workers=abc"], "config error: cluster.workers:"),
    "bool_type": (["logger.enabled=maybe"], "config error: logger.enabled: 'maybe' is not a boolean"),
    "system_metrics": (["logger.system_metrics_s=abc"], "config error: logger.system_metrics_s:"),
    "experiment_name": (["experiment_name= "], "config error: experiment_name:"),
    "heads": (["model.n_heads=3"], "config error: model.emb_dim (32) must be divisible by model.n_heads (3)"),
    "placement": (["model.norm_placement=side"], "config error: model.norm_placement: 'side' is not one of"),
    "num_workers": (["data.num_workers=-1"], "config error: data.num_workers: must be >= 0"),
    "test_offset": (["data.test_offset=-1"], "config error: data.test_offset:"),
    "every_n_steps": (["checkpoint.every_n_steps=0"], "config error: checkpoint.every_n_steps: must be >= 1"),
    "token_budget": (["optim.token_budget=100"], "config error: optim.token_budget: a budget of 100 tokens is less than"),
    "huge_micro_batch": (["optim.micro_batch_size=100000"], "config error: optim.micro_batch_size=100000: one step's logits"),
    "huge_context": (["model.context_length=100000000"], "config error: seq_len=100000000 (= model.context_length): one step's logits"),
    "scheme": (["logger.tracking_uri=ftp://x/y"], "config error: logger.tracking_uri=ftp://x/y: scheme ftp:// is not a tracking store"),
    "stale_with_server": (["logger.tracking_uri=http://127.0.0.1:9", "sweep.stale_after_s=60"],
                          "config error: sweep.stale_after_s: must exceed 90 s with a tracking server"),
    "credentials": (["logger.tracking_uri=http://127.0.0.1:9/x?access_token=abc"], "config error: logger.tracking_uri=http://127.0.0.1:9/x?access_token=***"),
    "sweep_without_m": (["seed=0,1"], "config error: seed=0,1: a sweep, which only -m"),
    "group_list": (["norm=[hand_rmsnorm,no_norm]"], "config error: norm=[hand_rmsnorm,no_norm]: a list of norm options"),
    "group_added": (["+norm=hand_rmsnorm"], "config error: +norm=hand_rmsnorm: norm has an option already"),
    "run_dir": (["hydra.run.dir=/proc/x"], "config error: hydra.run.dir: /proc is not writable"),
    "store_folder": (["paths.mlflow_db={tmp}"], "config error: logger.tracking_uri=sqlite:///{tmp}: paths.mlflow_db={tmp} is a directory"),
    "store_unwritable": (["paths.mlflow_db=/proc/x/mlflow.db"], "config error: logger.tracking_uri=sqlite:////proc/x/mlflow.db: /proc is not writable"),
    "artifacts": (["paths.mlflow_artifacts=/proc/x"], "config error: logger.artifact_location: /proc is not writable"),
    "checkpoint_folder": (["checkpoint.enabled=true", "checkpoint.dir=/proc/x"], "config error: checkpoint.dir: /proc is not writable"),
    "no_checkpoint": (["ckpt_path=last", "checkpoint.dir={tmp}/none"], "config error: ckpt_path: no checkpoint at {tmp}/none/last.ckpt"),
    "not_a_checkpoint": (["ckpt_path={tmp}/text.ckpt"], "config error: ckpt_path: {tmp}/text.ckpt is not a readable checkpoint"),
    "other_config_checkpoint": (["ckpt_path={tmp}/other.ckpt"], "config error: ckpt_path: {tmp}/other.ckpt was trained with another config"),
    # the data: the source's fields and files, as the run builds it, and the token cache's folder
    "split_rule": (["data=fineweb", "data.split_by=rows"], "config error: data.split_by: 'rows' is not one of the valid choices"),
    "row_order_hub": (["data=fineweb", "data.split_by=row_order"], "config error: data.split_by=row_order: splits the rows of data.files"),
    "token_folder": (["data=safetensors", "data.folder={tmp}"], "config error: data.folder: {tmp} has no train.safetensors"),
    "text_files": (["data=text_files", "data.paths={tmp}/none*.txt"], "config error: data.paths"),
    "cache_dir": (["paths.cache_dir=/proc/x"], "config error: data.cache_dir: /proc is not writable"),
    # under -m: the sweep's start refuses before Hydra launches job 0
    "empty_sweep": (["-m", "norm=glob(zzz*)"], "config error: norm=glob(zzz*): the sweep has no jobs"),
    "margin": ([*SWEEP, "report.margin.speed=0"], "config error: report.margin.speed: must be a number > 0, got 0"),
    "pairs": ([*SWEEP, "report.pairs=[[a,b,c]]"], "config error: report.pairs: each pair is two variants"),
    "reference": ([*SWEEP, "report.reference={model.norm_placement: side}"], "config error: report.reference:"),
    "kernel_s": ([*SWEEP, "report.speed_kernel_s=1e9"], "config error: report.speed_kernel_s: must be a number of seconds"),
    "sweeper": ([*SWEEP, "hydra/sweeper=sequential", "hydra.sweeper.futility=1.5"], "config error: hydra.sweeper.futility:"),
    "swept_unknown_key": ([*SWEEP, "foo=1,2"], "config error: foo: no such key"),
    "policy": ([*SWEEP, "sweep.on_code_change=nonsense"], "config error: sweep.on_code_change: 'nonsense' is not one of"),
    "launcher_name": ([*SWEEP, "hydra.launcher=joblib"], "config error: hydra.launcher=joblib:"),
    "sweep_dir": ([*SWEEP, "hydra.sweep.dir=/proc/x"], "config error: hydra.sweep.dir: /proc is not writable"),
    "reports_dir": ([*SWEEP, "paths.reports_dir=/proc/x"], "config error: paths.reports_dir: /proc is not writable"),
    "sweep_artifacts": ([*SWEEP, "paths.mlflow_artifacts=/proc/x"], "config error: logger.artifact_location: /proc is not writable"),
    "sweep_store_folder": ([*SWEEP, "paths.mlflow_db={tmp}"], "config error: logger.tracking_uri=sqlite:///{tmp}: paths.mlflow_db={tmp} is a directory"),
    "sweep_micro_batch": ([*SWEEP, "optim.micro_batch_size=100000"], "config error: optim.micro_batch_size=100000: one step's logits"),
    "sweep_cache_dir": ([*SWEEP, "paths.cache_dir=/proc/x"], "config error: data.cache_dir: /proc is not writable"),
    "sweep_claims_file": ([*SWEEP, "report.claims=[{tmp}/claims.yaml]"], "config error: {tmp}/claims.yaml: claims[0].kind: no such key"),
}


@pytest.mark.slow  # a fresh interpreter
def test_refusals_import_no_heavy_library(tmp_path: Path) -> None:
    """Before: a store path that is a folder, an unwritable checkpoint or artifact folder, a micro-batch
    far too large, a missing checkpoint or one that is no checkpoint, and every refusal at a sweep's
    start were answered after torch and Lightning (and for a sweep's report settings, pandas and
    scipy) were imported: seconds, tens of them beside load."""
    (tmp_path / "text.ckpt").write_text("not a checkpoint")
    (tmp_path / "claims.yaml").write_text("claims: [{kind: nope}]\n")
    # A checkpoint of another config: its run's record, as Lightning saves it (made here, where torch is loaded).
    import torch

    from src.tracking.identity import RUN_STATE_KEY

    state = {"identity": {"model": {"n_layers": 7}}, "fingerprint": "0" * 16}
    torch.save({"state_dict": {}, "callbacks": {RUN_STATE_KEY: state}}, tmp_path / "other.ckpt")
    common = [
        *FAST, f"paths.mlflow_db={tmp_path / 'store' / 'mlflow.db'}", f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.mlflow_artifacts={tmp_path / 'artifacts'}", f"paths.reports_dir={tmp_path / 'reports'}",
        f"paths.checkpoints_dir={tmp_path / 'checkpoints'}", f"hydra.run.dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]  # fmt: skip
    cases = [{"argv": [*common, *(a.replace("{tmp}", str(tmp_path)) for a in argv)], "env": {}} for argv, _ in REFUSED.values()]
    # cluster=slurm on a machine without sbatch: refused before the store is opened
    slurm = ("slurm", "config error: cluster=slurm: no sbatch or srun on PATH")
    cases.append({"argv": [*common, *SWEEP, "cluster=slurm"], "env": {"PATH": str(tmp_path)}})
    expected = [line.replace("{tmp}", str(tmp_path)) for _, line in REFUSED.values()] + [slurm[1]]
    names = [*REFUSED, slurm[0]]
    proc = subprocess.run(
        [sys.executable, "-c", REFUSALS, json.dumps(cases), json.dumps(HEAVY)], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600
    )
    # A sweep's start reads its claims files (src.report.read.claims), whose own imports are held to
    # none by tests/test_architecture.py: what they import still is not counted against the refusals.
    claims = subprocess.run(
        [sys.executable, "-c", f"import sys, src.report.read.claims; print(*(m for m in {HEAVY!r} if m in sys.modules))"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    ).stdout.split()  # fmt: skip
    said = proc.stderr.split("--- case ")[1:]
    assert len(said) == len(cases), proc.stderr[-3000:]
    wrong = []
    for name, start, text in zip(names, expected, said, strict=True):
        lines = [line.strip() for line in text.splitlines()[1:]]
        if "exit 2" not in lines or not any(line.startswith(start) for line in lines):
            wrong.append(f"{name}: not refused as expected: {text[-800:]}")
        elif set(lines[-1].removeprefix("heavy:").strip().split(",")) - {"", *claims}:  # the first to import one
            wrong.append(f"{name}: imported {lines[-1]}")
            break
    assert not wrong, "\n".join(wrong)


# A refusal the sweep's jobs share, at a sweep's start, with Hydra's compositions counted per case.
SIZED_REFUSALS = r"""
import json, os, runpy, sys
""" + COUNTED + r"""for n, argv in enumerate(json.loads(sys.argv[1])):
    os.environ["HYDRA_FULL_ERROR"] = "0"
    sys.argv = ["src.train", *argv]
    before = len(loads)
    print(f"--- case {n}", file=sys.stderr, flush=True)
    try:
        runpy.run_module("src.train", run_name="__main__")
    except SystemExit as exit_:
        print(f"exit {exit_.code}", file=sys.stderr, flush=True)
    print(f"loads {len(loads) - before}", file=sys.stderr, flush=True)
"""
SHARED_REFUSALS = ("sweep_store_folder", "margin", "sweep_micro_batch", "sweep_artifacts")


@pytest.mark.slow  # a fresh interpreter
def test_a_refusal_the_jobs_share_costs_the_same_at_any_sweep_size(tmp_path: Path) -> None:
    """Before: a 40-job sweep composed all 40 jobs (~0.1-0.2 s each; 20 s at 100 jobs beside load)
    before refusing a store path, an artifact folder, a micro-batch or a report margin that every job
    shares; now the sweep's config and at most its first job."""
    common = [*FAST, "-m", "seed=range(0,40)", f"hydra.sweep.dir={tmp_path / 'multirun'}", f"paths.reports_dir={tmp_path / 'r'}",
              f"paths.mlflow_db={tmp_path / 'store' / 'mlflow.db'}", f"paths.mlflow_artifacts={tmp_path / 'a'}"]  # fmt: skip
    cases = [[*common, *(a.replace("{tmp}", str(tmp_path)) for a in REFUSED[name][0] if a not in SWEEP)] for name in SHARED_REFUSALS]
    proc = subprocess.run(
        [sys.executable, "-c", SIZED_REFUSALS, json.dumps(cases)], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600
    )
    said = proc.stderr.split("--- case ")[1:]
    assert len(said) == len(cases), proc.stderr[-3000:]
    for name, text in zip(SHARED_REFUSALS, said, strict=True):
        lines = [line.strip() for line in text.splitlines()[1:]]
        start = REFUSED[name][1].replace("{tmp}", str(tmp_path))
        assert "exit 2" in lines and any(line.startswith(start) for line in lines), (name, text[-800:])
        assert int(lines[-1].removeprefix("loads ")) <= 2, (name, lines[-1])


# --- the memo never hands back a composition of files that changed --------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_yaml_edited_added_or_removed_between_two_compositions_is_seen(tmp_path: Path) -> None:
    """Before: the memo's key was the config's name, overrides and search path: in one process (a
    notebook that sweeps twice, the tests) an edited YAML gave the first composition back."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import MissingConfigException

    from src.core import compositions

    compositions.install()
    conf = tmp_path / "conf"
    _write(conf / "main.yaml", "defaults:\n  - g: a\n  - _self_\nlr: 1\n")
    _write(conf / "g" / "a.yaml", "x: 1\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        assert compose("main").g.x == 1
        assert compose("main").g.x == 1  # from the memo
        _write(conf / "g" / "a.yaml", "x: 2\n")  # the same size, within the same tick as the first write
        assert compose("main").g.x == 2
        _write(conf / "main.yaml", "defaults:\n  - g: a\n  - _self_\nlr: 3\n")
        assert compose("main").lr == 3
        _write(conf / "g" / "b.yaml", "x: 5\n")  # added
        assert compose("main", ["g=b"]).g.x == 5
        (conf / "g" / "b.yaml").unlink()  # removed
        with pytest.raises(MissingConfigException):
            compose("main", ["g=b"])


def test_a_relative_search_path_follows_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the same relative `hydra.searchpath` from another working folder gave the first
    folder's composition back."""
    from hydra import compose, initialize_config_dir

    from src.core import compositions

    compositions.install()
    _write(tmp_path / "conf" / "main.yaml", "lr: 1\n")
    for name in ("a", "b"):
        _write(tmp_path / name / "mine" / "h" / "o.yaml", f"who: {name}\n")
    with initialize_config_dir(config_dir=str(tmp_path / "conf"), version_base="1.3"):
        for name in ("a", "b", "a"):
            monkeypatch.chdir(tmp_path / name)
            assert compose("main", ["hydra.searchpath=[file://mine]", "+h=o"]).h.who == name


def test_another_hydra_composes_unpatched_after_one_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hydra the memo was not written for: Hydra's own functions stay, one warning says so, and the
    config is what the memo makes."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from src.core import compositions, patches
    from src.core.paths import compose

    compositions.install()
    remembered = compose(["norm=hand_rmsnorm", "seed=3"])
    compositions.uninstall()
    own = ConfigLoaderImpl.load_configuration
    monkeypatch.setattr(patches, "version", lambda dist: "1.4.0" if dist == "hydra-core" else "0")
    monkeypatch.setattr(patches, "_said", set())
    try:
        for _ in range(2):
            compositions.install()
            assert ConfigLoaderImpl.load_configuration is own  # left as Hydra ships it
        err = unwrapped(capsys.readouterr().err).strip().splitlines()
        assert err == [
            "[normsweep] warning: each config composed once per process (src/core/compositions.py) left out: "
            "hydra-core 1.4.0 is not the >=1.3.2,<1.4 it was written for; each is composed as Hydra composes it, "
            "every time it is asked for"
        ], err
        assert compose(["norm=hand_rmsnorm", "seed=3"]) == remembered
    finally:
        monkeypatch.undo()
        compositions.install()
    assert ConfigLoaderImpl.load_configuration is not own


def test_a_remembered_composition_makes_no_config_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the memo found each composition's search path by making a config repository and parsing
    every override (~10-15 ms), and parsed them again for Hydra's check of sweep overrides, at every
    ask, remembered or not: three times a job in a sweep."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    from src.core import compositions
    from src.core.paths import hydra_initialized, register_resolvers

    register_resolvers()
    compositions.install()
    made, parsed = [], []
    own = ConfigLoaderImpl._parse_overrides_and_create_caching_repo
    monkeypatch.setattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo", lambda self, *a: made.append(a) or own(self, *a))
    parse = OverridesParser.parse_overrides
    monkeypatch.setattr(OverridesParser, "parse_overrides", lambda self, *a, **k: parsed.append(a or k) or parse(self, *a, **k))
    with hydra_initialized():
        load = GlobalHydra.instance().config_loader().load_configuration
        load("train", ["seed=918273"], RunMode.RUN)  # the memo's miss: Hydra composes it, with its own repository
        composed, read = len(made), len(parsed)
        load("train", ["seed=918273"], RunMode.RUN)  # remembered, its overrides already checked
        assert (len(made), len(parsed)) == (composed, read), parsed[read:]
        load("train", ["seed=918274"], RunMode.RUN)  # another job: Hydra's own composition alone makes one
        assert len(made) - composed == 1, made[composed:]


def test_a_sweeps_start_checks_each_job_without_writing_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the start resolved each job whole, its record's YAML included (~12 ms a job), to keep
    only the code it runs; the job resolves it again as it trains. Now its checks with the model alone,
    and the same code."""
    from src.core.paths import compose
    from src.launch.callbacks import job_code, resolve_jobs
    from src.tracking.record import RecordSpec
    from src.training.run_spec import check_job, resolve

    cfg = compose(["model.n_layers=1", "model.emb_dim=32", "model.n_heads=2", "model.context_length=32"])
    checked = check_job(cfg)
    made = []
    own = RecordSpec.from_config.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(RecordSpec, "from_config", classmethod(lambda cls, *a, **k: made.append(a) or own(cls, *a, **k)))
    resolve_jobs(cfg, [{"fingerprint": checked.identity.fingerprint}], [(cfg, checked)])
    assert not made
    assert job_code[checked.identity.fingerprint] == resolve(cfg).record.code
