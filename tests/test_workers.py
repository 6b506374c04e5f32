"""`make test`'s workers: what shares a costly fixture's engine runs on one worker, so each such engine
(a local SLURM, the tiny sweeps, a module's trained runs) is started once, as in a plain run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SHARED_ENGINES, cores_per_worker, worker_groups
from helpers import REPO


def test_files_sharing_an_engine_share_a_group() -> None:
    def item(file: str, *fixtures: str) -> SimpleNamespace:  # what worker_groups reads of a pytest.Item
        return SimpleNamespace(path=REPO / "tests" / file, fixturenames=["tmp_path", *fixtures])

    groups = worker_groups([
        item("test_team_server.py", "team_server"), item("test_team_server.py"),
        item("test_slurm.py", "local_slurm", "team_server"), item("test_report.py"), item("test_report.py", "tiny_client"),
        item("test_mlflow_ui.py", "tiny_sweep"), item("test_slurm_more.py", "local_slurm"), item("test_tokenizer.py"),
    ])  # fmt: skip
    assert groups["test_tokenizer.py"] == "test_tokenizer.py"  # no shared engine: the file alone
    assert groups["test_slurm.py"] == groups["test_slurm_more.py"]  # one local SLURM for both
    assert groups["test_team_server.py"] == "test_team_server.py"  # a team server per worker (tests/conftest.py)
    assert groups["test_report.py"] == groups["test_mlflow_ui.py"] != groups["test_slurm.py"]  # a whole file moves


def test_each_worker_gets_its_share_of_the_cores() -> None:
    assert cores_per_worker(2, 2) == 1 and cores_per_worker(16, 2) == 8 and cores_per_worker(16, 3) == 5
    assert cores_per_worker(1, 2) == 1  # never none
    assert cores_per_worker(8, 1) is None and cores_per_worker(8, 0) is None  # no xdist: torch's default


# Session fixtures cheap enough to build once per worker: a file each, made in seconds.
PER_WORKER = {"token_cache_dir": "tokenizes the bundled corpus (~1 s)", "store_template": "one migrated SQLite file (~2 s)",
              "team_server": "PostgreSQL and mlflow server (~5 s; ~7 s beside load)"}  # fmt: skip


def test_every_session_fixture_is_shared_or_cheap() -> None:
    """conftest.py's session fixtures, which any file may use (one that a test file defines is its own:
    the file's tests are on one worker already)."""
    conftest = (REPO / "tests" / "conftest.py").read_text()
    found = set(re.findall(r'@pytest\.fixture\(scope="session"\)\s+def (\w+)', conftest))
    assert "team_server" in found
    unplaced = found - SHARED_ENGINES.keys() - PER_WORKER.keys()
    assert not unplaced, (
        f"session fixtures {sorted(unplaced)}: add each to tests/conftest.py's SHARED_ENGINES (its users' files then "
        "run on one worker, and it is built once) or, if it takes seconds, to PER_WORKER here"
    )


@pytest.mark.slow  # a pytest-xdist session of its own (two worker processes)
def test_a_files_tests_run_on_one_worker() -> None:
    """pytest 9.2 moved the node id that pytest-xdist 3.8 suffixes with a test's group: --dist loadgroup
    then scattered a file's tests over both workers without a word, and a module's fixture (one
    file's trained sweeps) was built twice. Run the way `make test` runs, every test of a file is on
    one worker."""
    files = ["tests/test_ports.py", "tests/test_tokenizer.py"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider", *files],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, path in re.findall(r"^\[(gw\d+)\] .*?PASSED (tests/[\w.]+)::", done.stdout, re.M):
        workers.setdefault(path, set()).add(worker)
    assert workers.keys() == set(files), done.stdout[-3000:]
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers


def test_the_longest_groups_are_taken_first() -> None:
    """The shared engines' groups first, then the groups with the most slow tests: xdist's own order (by
    number of tests) hands out the quick, many-cased files first, which can leave one worker alone
    with a long group at the end."""
    from conftest import longest_first

    slow = pytest.mark.slow

    def item(file: str, *marks: pytest.MarkDecorator) -> SimpleNamespace:
        found = [m.mark for m in marks]
        return SimpleNamespace(path=REPO / "tests" / file, name=file,
                               get_closest_marker=lambda name: next((m for m in found if m.name == name), None))  # fmt: skip

    items = [item("test_config.py"), item("test_config.py"), item("test_pool.py", slow), item("test_slurm.py", slow),
             item("test_user_norms.py", slow), item("test_user_norms.py", slow), item("test_report.py", slow)]  # fmt: skip
    group = {"test_config.py": "test_config.py", "test_pool.py": "test_pool.py", "test_slurm.py": "slurm",
             "test_user_norms.py": "test_user_norms.py", "test_report.py": "tiny_sweep"}  # fmt: skip
    order = [i.name for i in longest_first(items, group)]  # type: ignore[arg-type]
    assert order == ["test_slurm.py", "test_report.py", "test_user_norms.py", "test_user_norms.py", "test_pool.py",
                     "test_config.py", "test_config.py"]  # fmt: skip


def test_a_test_marked_alone_is_in_a_file_the_alone_part_collects(tmp_path: Path) -> None:
    """`make test`'s alone part collects only the files that spell the mark (Makefile's ALONE_FILES): a
    test marked otherwise (a module's `pytestmark` through an alias) is refused at collection, not
    silently left out of both parts."""
    from conftest import ALONE_MARK, alone_outside_their_files

    spelled, aliased = tmp_path / "test_spelled.py", tmp_path / "test_aliased.py"
    spelled.write_text(f"@{ALONE_MARK}\ndef test_a(): ...\n")
    aliased.write_text("from pytest import mark\npytestmark = mark.alone\ndef test_b(): ...\n")

    def item(path: Path, *marks: str) -> SimpleNamespace:
        return SimpleNamespace(path=path, nodeid=f"{path.name}::t",
                               get_closest_marker=lambda name: name if name in marks else None)  # fmt: skip

    items = [item(spelled, "alone"), item(aliased, "alone"), item(aliased), item(REPO / "tests" / "test_ports.py")]
    assert alone_outside_their_files(items) == [f"{aliased.name}::t"]  # type: ignore[arg-type]
    # Makefile's list, as make expands it: this suite's files that hold an alone test.
    made = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "alone-files"], cwd=REPO,
                          input="alone-files:\n\t@echo $(ALONE_FILES)\n", capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0 and set(made.stdout.split()) >= {"tests/test_slurm.py", "tests/test_speed_check.py"}, made
