"""Patches of a library's internals sit behind a check of the installed version (src/core/patches.py):
on the versions they were written for they apply; on any other, or with NORMSWEEP_UNPATCHED set, the
library runs as it ships after one warning line. The composition memo's fallback is run in
tests/test_compositions.py; the UI's here, through `python -m src.ui`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import REPO, cli_env, ui_env, unwrapped

from src.core import patches
from src.core.ports import free_port
from src.core.process_group import stop_group
from src.tracking.ui_app import UI_PATCH, UI_WRITTEN_FOR, WORKFLOW_KEY, registered


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patches, "_said", set())
    monkeypatch.delenv(patches.UNPATCHED_ENV, raising=False)


@pytest.mark.usefixtures("fresh_warnings")
def test_a_patch_applies_only_on_the_versions_it_was_written_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = {"mlflow": "3.17.2", "flask": "3.1.3"}
    monkeypatch.setattr(patches, "version", lambda dist: installed[dist])
    assert patches.patchable(UI_PATCH, UI_WRITTEN_FOR, "plain")
    installed["mlflow"] = "3.18.0"
    assert not patches.patchable(UI_PATCH, UI_WRITTEN_FOR, "MLflow's own page")
    assert not patches.patchable(UI_PATCH, UI_WRITTEN_FOR, "MLflow's own page")  # said once
    assert unwrapped(capsys.readouterr().err).splitlines() == [
        f"[normsweep] warning: {UI_PATCH} left out: mlflow 3.18.0 is not the >=3.17,<3.18 it was written for; "
        "MLflow's own page"
    ]
    installed["mlflow"] = "not-a-version"
    assert not patches.patchable("another patch", UI_WRITTEN_FOR, "as it ships")
    assert "mlflow's version cannot be read (InvalidVersion)" in capsys.readouterr().err


@pytest.mark.usefixtures("fresh_warnings")
def test_the_unpatched_switch_leaves_every_patch_out(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(patches.UNPATCHED_ENV, "1")
    assert not patches.patchable(UI_PATCH, UI_WRITTEN_FOR, "as it ships")
    assert f"left out: {patches.UNPATCHED_ENV} is set; as it ships" in capsys.readouterr().err


def test_the_ui_app_is_registered_by_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ui_env(tmp_path)["PYTHONPATH"].split(os.pathsep)[0])
    assert registered()


def test_a_failed_jobs_result_keeps_hydras_class_on_another_hydra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback of recasting a job's result in place (src/core/patches.py): Hydra's JobReturn,
    which prints its own line before the failure; the failure itself read without raising it."""
    from hydra.core.utils import JobReturn, JobStatus

    from src.launch.sweep_end import JobFailed, SaidFailure, returned, without_hydra_line

    failed = JobReturn(status=JobStatus.FAILED)
    failed.return_value = JobFailed("the job's own line")
    without_hydra_line(failed)
    assert type(failed) is SaidFailure and str(returned(failed)) == "the job's own line"
    with pytest.raises(JobFailed):
        failed.return_value  # noqa: B018  (raises, as Hydra's sweeper reads it)
    monkeypatch.setattr(patches, "_said", set())
    monkeypatch.setenv(patches.UNPATCHED_ENV, "1")
    plain = JobReturn(status=JobStatus.FAILED)
    plain.return_value = JobFailed("the job's own line")
    without_hydra_line(plain)
    assert type(plain) is JobReturn and str(returned(plain)) == "the job's own line"


def _ui_page(db: Path, log: Path, env: dict[str, str]) -> str:
    """The page `python -m src.ui` serves at its root, once it answers."""
    port = free_port()
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "src.ui", "--port", str(port), "--workers", "1", f"paths.mlflow_db={db}"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, f"the UI exited:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    return response.read().decode()
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, f"the UI did not answer:\n{log.read_text()[-3000:]}"
                time.sleep(1)
    finally:
        stop_group(server)  # the server and the workers it started


@pytest.mark.slow  # two real MLflow UI servers
def test_the_ui_serves_mlflows_own_page_when_its_patch_is_left_out(migrated_store: dict[str, str], tmp_path: Path) -> None:
    db = Path(migrated_store["db"])
    patched = _ui_page(db, tmp_path / "patched.log", ui_env(tmp_path / "entry"))
    assert WORKFLOW_KEY in patched  # the start script, first in the page's head
    plain = _ui_page(db, tmp_path / "plain.log", {**cli_env(), patches.UNPATCHED_ENV: "1"})
    assert WORKFLOW_KEY not in plain and "<head>" in plain  # MLflow's own page, served
    said = [line for line in unwrapped((tmp_path / "plain.log").read_text()).splitlines() if "left out" in line]
    assert said == [
        f"[normsweep] warning: {UI_PATCH} left out: {patches.UNPATCHED_ENV} is set; MLflow serves its own page "
        "unchanged (open an experiment's printed link)"
    ], said
    assert "left out" not in (tmp_path / "patched.log").read_text()


def test_the_memory_checks_tracker_falls_back_to_torchs_own_with_the_same_estimate(
    fresh_warnings: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memory check overrode torch's private MemTracker internals on every torch >= 2.4 (with no
    version gate): on another torch, or NORMSWEEP_UNPATCHED set, MemTracker runs as it ships."""
    from helpers import TINY_MODEL
    from torch.distributed._tools.mem_tracker import MemTracker

    from src.core.paths import compose
    from src.preflight import memory
    from src.training.run_spec import validate

    cfg = validate(compose(TINY_MODEL))
    patched = memory.tracker_class()
    assert patched is not MemTracker and issubclass(patched, MemTracker)
    fast = memory._replay(cfg, 2, 32, "32-true", "cpu")
    monkeypatch.setenv(patches.UNPATCHED_ENV, "1")
    assert memory.tracker_class() is MemTracker
    assert memory._replay(cfg, 2, 32, "32-true", "cpu") == fast  # the same peak, by torch's own walk
    assert f"{patches.PEAK_PATCH} left out: {patches.UNPATCHED_ENV} is set; {patches.PEAK_INSTEAD}" in unwrapped(capsys.readouterr().err)


def test_a_benchmarks_recompile_limit_is_set_only_on_the_torch_it_names(fresh_warnings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from src.bench.norms import raise_recompile_limit

    config = torch._dynamo.config
    monkeypatch.setattr(config, "recompile_limit", config.recompile_limit)  # restored after the test
    monkeypatch.setattr(config, "accumulated_recompile_limit", config.accumulated_recompile_limit)
    monkeypatch.setenv(patches.UNPATCHED_ENV, "1")
    before = config.recompile_limit
    assert raise_recompile_limit() is False and config.recompile_limit == before
    monkeypatch.delenv(patches.UNPATCHED_ENV)
    assert raise_recompile_limit() is True and config.recompile_limit == 1024


# What a normsweep process sees of torchmetrics' optional imports once Lightning is loaded, and after.
LEAN_PROBE = """
import sys
before = set(sys.modules)
import src  # every normsweep process starts here
print("src loads:", sorted(m for m in set(sys.modules) - before if m.partition(".")[0] not in sys.stdlib_module_names))
import lightning.pytorch
from torchmetrics.utilities.imports import _MATPLOTLIB_AVAILABLE
print("loaded with Lightning:", sorted(m for m in ("scipy.signal", "matplotlib") if m in sys.modules))
print("torchmetrics plots:", bool(_MATPLOTLIB_AVAILABLE))
import scipy
from scipy.signal import windows
print("alias:", scipy.signal.hamming is windows.hamming, type(scipy.signal) is type(scipy))
print("finders left:", [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "LeanFinder"])
"""


@pytest.mark.parametrize("unpatched", [False, True], ids=["patched", "as it ships"])
def test_lightning_loads_without_torchmetrics_optional_imports_and_scipy_signal_loads_whole_after(unpatched: bool) -> None:
    """torchmetrics imported scipy.signal and matplotlib as Lightning loaded it (about 2 s of CPU a
    process, src/core/lean_lightning.py). Deferred, scipy.signal is the real module wherever it is first
    imported after, with the alias torchmetrics gives it; NORMSWEEP_UNPATCHED loads both as torchmetrics ships."""
    env = {**cli_env(), **({patches.UNPATCHED_ENV: "1"} if unpatched else {})}
    done = subprocess.run([sys.executable, "-c", LEAN_PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "src loads: ['src', 'src.core', 'src.core.lean_lightning']",  # the finder, and the standard library only
        f"loaded with Lightning: {['matplotlib', 'scipy.signal'] if unpatched else []}",
        f"torchmetrics plots: {unpatched}",
        "alias: True True",  # the real module, aliased, in both
        "finders left: []",
    ]
    from src.core.lean_lightning import LEAN_INSTEAD, LEAN_PATCH

    warned = f"[normsweep] warning: {LEAN_PATCH} left out: {patches.UNPATCHED_ENV} is set; {LEAN_INSTEAD}"
    assert [line for line in unwrapped(done.stderr).splitlines() if "left out" in line] == ([warned] if unpatched else [])
