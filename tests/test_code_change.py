"""A result belongs to its code: a re-run sweep does not reuse results of other code silently.

The sweeps run on a copy of the project (src/, conf/, README.md, a git commit of them) in tmp_path,
so a change to `src/model/` is a real change of the code that runs, not a simulated one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, TINY_MODEL, cli_env, unwrapped
from mlflow.tracking import MlflowClient

from src.tracking.code import CODE_PATHS, compute
from src.tracking.tags import CODE_FINGERPRINT_TAG, SUPERSEDED_TAG, SWEEP_TAG

EXPERIMENT = "code_change"
COPIED = ("src", "conf", "hydra_plugins", "README.md")


def _copy_project(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line)


def test_only_result_code_changes_the_code_fingerprint(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    before = compute(root)
    assert before.fingerprint == compute(REPO).fingerprint  # contents, not location or git
    assert "src/model/csrc/rms_norm.cpp" in before.files and "src/train.py" in before.files
    assert before.versions.keys() == {"torch", "lightning"}
    assert not [f for f in before.files if f.startswith(("src/report", "src/launch", "src/tracking"))]
    for path in ("README.md", "src/report/read/table.py", "src/launch/report_hook.py", "conf/train.yaml"):
        _append(root / path, "\n# a note\n")
    (root / "src/model/__pycache__").mkdir(exist_ok=True)
    (root / "src/model/__pycache__/gpt.cpython-311.pyc").write_bytes(b"\0")
    assert compute(root) == before
    for entry in CODE_PATHS:  # every listed path exists: a renamed folder would drop out silently
        assert (root / entry).exists(), entry
    _append(root / "src/model/norms.py", "\n# a fix\n")
    after = compute(root)
    assert after.fingerprint != before.fingerprint
    assert [f for f in after.files if after.files[f] != before.files[f]] == ["src/model/norms.py"]
    # A shipped norm's `_target_` is code the config fingerprint leaves out: its YAML is code here.
    _append(root / "conf/norm/hand_rmsnorm.yaml", "\n# another class\n")
    assert [f for f, h in compute(root).files.items() if h != after.files.get(f)] == ["conf/norm/hand_rmsnorm.yaml"]


class Project:
    """A copy of the project with its own store; `sweep` runs `python -m src.train -m` in it."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root = _copy_project(root / "project")
        self.store = root / "store"  # outside the checkout: the runs' git state stays clean
        self.client = MlflowClient(f"sqlite:///{self.store / 'mlflow.db'}")
        self.cache = cache
        self.sweeps = 0
        git = ["git", "-C", str(self.root), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "code"], check=True)
        self.commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout[:7]

    def sweep(self, *overrides: str, report: bool = False) -> subprocess.CompletedProcess[str]:
        self.sweeps += 1
        args = [
            *TINY_MODEL,
            "optim.max_steps=2",
            "val_every_n_steps=2",
            "norm=torch_layernorm",
            f"experiment_name={EXPERIMENT}",
            f"paths.cache_dir={self.cache}",
            f"paths.mlflow_db={self.store / 'mlflow.db'}",
            f"paths.mlflow_artifacts={self.store / 'mlartifacts'}",
            f"paths.reports_dir={self.store / 'reports'}",
            f"paths.checkpoints_dir={self.store / 'checkpoints'}",
            f"hydra.sweep.dir={self.store / f'multirun{self.sweeps}'}",
            *([] if report else ["~hydra.callbacks.sweep_report"]),
            *overrides,
        ]
        return subprocess.run(
            [sys.executable, "-m", "src.train", "-m", *args],
            cwd=self.root, env=cli_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    def runs(self) -> list:
        exp = self.client.get_experiment_by_name(EXPERIMENT)
        return [r for r in self.client.search_runs([exp.experiment_id]) if r.data.tags.get(SWEEP_TAG) != "true"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, token_cache_dir: Path) -> Project:
    """The copy, after a first sweep of two seeds made by its original code."""
    project = Project(tmp_path_factory.mktemp("code_change"), token_cache_dir)
    first = project.sweep("seed=0,1")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    return project


@pytest.mark.slow
def test_a_model_change_stops_the_rerun_then_keep_and_rerun_decide(project: Project) -> None:
    old = {r.info.run_id: r for r in project.runs()}
    assert len(old) == 2 and all(r.data.tags[CODE_FINGERPRINT_TAG] for r in old.values())
    manifest = project.client.download_artifacts(next(iter(old)), "code/manifest.json", str(project.store))
    assert "src/model/norms.py" in Path(manifest).read_text()

    _append(project.root / "src/model/norms.py", "\n# a fix\n")
    # Seed 2 is new and its job comes first: it would train before the old runs' jobs were reached.
    stopped = project.sweep("seed=2,0,1")
    assert stopped.returncode != 0
    (line,) = [x for x in stopped.stderr.splitlines() if "on_code_change" in x]
    print(line)  # the message as a user sees it
    assert line.startswith("config error: sweep.on_code_change=fail: 2 finished or resumable runs of this sweep were made by other code")
    assert f"2 at commit {project.commit} (src/model/norms.py differs)" in line
    assert "sweep.on_code_change=rerun" in line and "=keep" in line
    assert {r.info.run_id for r in project.runs()} == set(old)  # nothing trained, nothing recorded

    # keep: the old runs are reused, seed 2 is trained by the new code, the report marks the mix.
    kept = project.sweep("seed=2,0,1", "sweep.on_code_change=keep", report=True)
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert kept.stdout.count("kept (sweep.on_code_change=keep)") == 2
    runs = project.runs()
    assert len(runs) == 3 and len({r.data.tags[CODE_FINGERPRINT_TAG] for r in runs}) == 2
    assert f"2/3 made by other code (commit {project.commit})" in kept.stdout
    assert "These runs come from 2 code version(s)" in kept.stdout
    report_md = (project.store / "reports" / EXPERIMENT / "report.md").read_text()
    assert "made by other code" in report_md

    # rerun: both old runs are trained again; they stay in the store, marked superseded by the new ones.
    rerun = project.sweep("seed=0,1", "sweep.on_code_change=rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert unwrapped(rerun.stdout).count("training it again (sweep.on_code_change=rerun)") == 2
    after = {r.info.run_id: r for r in project.runs()}
    assert len(after) == 5 and set(old) < set(after)
    new_ids = set(after) - set(old)
    assert {after[i].data.tags.get(SUPERSEDED_TAG) for i in old} <= new_ids
    assert all(SUPERSEDED_TAG in after[i].data.tags for i in old)
    current = {after[i].data.tags[CODE_FINGERPRINT_TAG] for i in new_ids}
    assert len(current) == 1 and current != {old[i].data.tags[CODE_FINGERPRINT_TAG] for i in old}
