"""Each job's config is composed once (src/core/compositions.py), and the memo changes no config.

The memo patches Hydra's config loader for the whole process, and importing src.train installs it:
the comparisons with Hydra's own composition run in a fresh interpreter, the plain pass first.
"""

from __future__ import annotations

import json
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


# `python -m src.train` with Hydra's loader counted: each full composition (`_load_configuration_impl`)
# adds one; the count is printed as the process exits.
COUNT = r"""
import atexit, runpy, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl

loads = []
compose = ConfigLoaderImpl._load_configuration_impl
def counted(self, *args, **kwargs):
    loads.append(1)
    return compose(self, *args, **kwargs)
ConfigLoaderImpl._load_configuration_impl = counted
atexit.register(lambda: print(f"config loads: {len(loads)}", file=sys.stderr))
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
    # ...and its last line says where its time went, from the jobs' recorded training time
    split = [line for line in proc.stdout.splitlines() if line.startswith("[normsweep] where the time went: ")]
    assert len(split) == 1 and "training " in split[0] and "the rest " in split[0], proc.stdout[-2000:]

    from mlflow.tracking import MlflowClient

    from src.core.memory_peak import JOB_PEAK, PROCESS_PEAK

    runs = sorted(training_runs(MlflowClient(store["uri"]), "normsweep"), key=lambda r: r.info.start_time)
    peaks = [r.data.metrics[JOB_PEAK] for r in runs]
    assert len(peaks) == 6 and not any(PROCESS_PEAK in r.data.metrics for r in runs), [r.data.metrics for r in runs]
    # Each job's own peak starts from the resident size the job found (clear_refs), so what the process
    # kept job after job would show here as a climb: flat peaks are the bound on the growth. (The
    # process's lifetime peak is not: the sweep's end, after the jobs, is not a job's.)
    assert max(peaks) <= 1.05 * min(peaks), peaks  # each job's own, not climbing in job order


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


# Refusals of the command line, each answered before torch, Lightning or MLflow is imported: one
# interpreter runs them all through the entry point, then names the heavy modules it imported.
REFUSALS = r"""
import os, runpy, sys

for override in sys.argv[1:]:
    os.environ["HYDRA_FULL_ERROR"] = "0"  # the entry point sets it to 1 for its own run
    sys.argv = ["src.train", override, "paths.mlflow_db=/nonexistent/never/mlflow.db"]
    try:
        runpy.run_module("src.train", run_name="__main__")
    except SystemExit as exit_:
        print(f"exit {exit_.code}", file=sys.stderr, flush=True)
print("heavy:", ",".join(m for m in ("torch", "lightning", "mlflow") if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.slow  # a fresh interpreter
def test_refusals_import_no_torch_lightning_or_mlflow() -> None:
    refused = {
        "optim.lr=-1": "config error: optim.lr:",
        "seed=abc": "config error: seed:",
        "norm=nope": "config error: norm",
        "+optim.lrr=1": "config error: optim.lrr:",
        "cluster.devices=0": "config error: cluster.devices:",
        "experiment_name= ": "config error: experiment_name:",
        "model.n_heads=3": "config error: model.emb_dim (128) must be divisible by model.n_heads (3)",
        # the URI's scheme, with the config's checks (before: after ~5 s of importing Lightning)
        "logger.tracking_uri=ftp://x/y": "config error: logger.tracking_uri=ftp://x/y: scheme ftp:// is not a tracking store",
    }
    proc = subprocess.run(
        [sys.executable, "-c", REFUSALS, *refused], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    lines = proc.stderr.splitlines()
    assert [line for line in lines if line.startswith("exit ")] == ["exit 2"] * len(refused), proc.stderr[-3000:]
    for start in refused.values():
        assert any(line.startswith(start) for line in lines), proc.stderr[-3000:]
    assert lines[-1].strip() == "heavy:", proc.stderr[-3000:]


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
