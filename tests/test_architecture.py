"""The architecture, checked: the stages import top-down, the late stages do not load torch, each
value has one owner (the store location reaches every reader), and so does a run's life."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from mlflow.tracking import MlflowClient

from src.core.paths import compose, tracking_uri
from src.report.__main__ import main as report_main
from src.tracking.store import Store

SRC = REPO / "src"

# Modules a reader or a bookkeeping step imports without a model: loading torch (seconds) there
# would slow every report, `python -m src.data` and the Hydra sweep callbacks.
TORCH_FREE = [
    "src.core.paths",
    "src.core.cli",
    "src.core.schema",
    "src.core.atomic_io",
    "src.report",
    "src.report.__main__",
    "src.report.judge.pairs",
    "src.report.commands.status",
    "src.stats.inference",
    "src.stats.pairs",
    "src.stats.sequential",
    "src.tracking.identity",
    "src.tracking.sweep",
    "src.tracking.store",  # and its helpers: the URI and its credentials, retries, the SQLite file, a server
    "src.tracking.store_uri",
    "src.tracking.checkpoint_file",  # a checkpoint's recorded config, read before a refusal
    "src.report.read.settings",
    "src.tracking.retry",
    "src.tracking.sqlite_file",
    "src.tracking.store_faults",
    "src.tracking.server_client",
    "src.core.budget",
    "src.data",
    "src.data.base",
    "src.data.cache",
    "src.data.shakespeare",
    "src.data.text_files",
    "src.data.fineweb",
    "src.data.safetensors_tokens",
    "src.data.__main__",
]


def module_name(path: Path) -> str:
    """'src.data.cache' for src/data/cache.py, 'src.data' for src/data/__init__.py."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def src_imports(path: Path) -> set[str]:
    """The modules of src/ that one file imports, as absolute dotted names, at any depth: an import
    inside a function (imported late to stay fast) is a dependency all the same."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from ..paths import x` climbs node.level - 1 packages
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # `from src.core import paths` names a module; `from src.core.paths import compose` a name in one
            found.update(f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module for a in node.names)
    return {m for m in found if m == "src" or m.startswith("src.")}


def test_stages_import_top_down() -> None:
    """The floors of [tool.importlinter] in pyproject.toml hold: import-linter finds no import running
    up or sideways, no room of src without a floor, nothing importing a __main__."""
    # The console script beside this interpreter first: the venv's, even when its bin is not on PATH.
    lint_imports = shutil.which("lint-imports", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert lint_imports, "lint-imports not found: install the dev tools (pip install -e '.[dev]')"
    # --no-cache: its cache would be a folder written into the checkout; the graph takes well under a second.
    # COLUMNS: rich, which prints the report, would wrap it at 80 columns off a terminal.
    proc = subprocess.run(
        [lint_imports, "--no-cache", "--no-logo"],
        cwd=REPO, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(
            f"{proc.stdout}{proc.stderr}\n"
            "The imports break the floors of tool.importlinter in pyproject.toml: move the import down, or give "
            "a new room a floor there. `lint-imports` in the repository root reruns this check alone.",
            pytrace=False,
        )


def test_data_modules_import_one_way() -> None:
    """Inside the data stage: the cache knows no source; sources know the base, never the registry."""
    graph = {
        path.stem: {m.split(".")[2] for m in src_imports(path) if m.startswith("src.data.")}
        for path in (SRC / "data").glob("*.py")
    }
    assert graph["cache"] == {"tokenizer"}  # the BPE that turns text into tokens
    assert graph["base"] == {"cache"}
    assert graph["tokenizer"] == set()
    for source in ("shakespeare", "text_files", "fineweb", "safetensors_tokens"):
        assert "sources" not in graph[source] and graph[source] <= {"base", "cache", "tokenizer"}, source
    visiting: list[str] = []

    def visit(module: str) -> None:
        assert module not in visiting, f"import cycle: {' -> '.join([*visiting, module])}"
        visiting.append(module)
        for dep in graph.get(module, ()):
            visit(dep)
        visiting.pop()

    for module in graph:
        visit(module)


def test_late_stages_do_not_import_torch() -> None:
    code = f"import sys; import {', '.join(TORCH_FREE)}; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


# What a sweep runs before its first job trains, beside Hydra: the config's value checks, the report's
# settings and the claims files it will judge. None of them may import the analysis's libraries, nor
# the model's, the trainer's or the store's: every sweep would pay for them at its start.
HEAVY = ("pandas", "scipy", "matplotlib", "mlflow", "torch", "lightning")
BEFORE_THE_FIRST_JOB = """
import sys
from omegaconf import OmegaConf
from src.core.paths import compose
from src.training.run_spec import check_values
from src.report.read.settings import reference_setting, reference_values, settings

cfg = compose(["report.margin.speed=0.05", "report.pairs=[[hand_layernorm,torch_layernorm]]",
               "report.reference={norm: torch_layernorm}"])
check_values(cfg)
report = OmegaConf.to_container(cfg.report, resolve=True)
settings(report)
reference_values(reference_setting(report), {"norm": ["torch_layernorm", "hand_layernorm"]})
print(",".join(m for m in HEAVY if m in sys.modules))
"""
CLAIMS_FORMAT = """
import pathlib, sys, tempfile
from src.report.kinds import KINDS
from src.report.read.claims import chosen, load

study = chosen(None)[0]  # the study's claims file, read and checked as a sweep's start does
folder = pathlib.Path(tempfile.mkdtemp())
(folder / "mine.yaml").write_text(
    "claims:\\n- {statement: mine is no slower, metric: train_time_s,"
    " parts: [{b: hand_rmsnorm, a: torch_rmsnorm, asserts: no_worse, margin: 0.02}]}\\n")
mine = load("mine", ["hand_rmsnorm", "torch_rmsnorm"], [folder])
read = {p.kind.name for f in (study, mine) for c in f.claims for p in c.parts}
assert read == set(KINDS), f"a file of every kind is read here: add one of {set(KINDS) - read}"
print(",".join(m for m in HEAVY if m in sys.modules))
"""


# Each job's model sized at a sweep's start (src.launch.callbacks.resolve_jobs): torch is imported to
# check the norm (built at each width on the meta device), but not torch's compiler stack, which a
# model built there would import (its embeddings' initial values are drawn through it): ~2 s that a
# launcher training elsewhere (a pool, SLURM) never needs.
RESOLVED_JOBS = """
import sys
from src.core.paths import compose
from src.training.run_spec import resolve

for overrides in ([], ["model=gpt2_small", "norm=dyt", "model.qk_norm=true"], ["norm=hand_rmsnorm", "model.norm_placement=peri"]):
    resolve(compose([*overrides, "logger.enabled=false", "checkpoint.enabled=false"]), trains_here=False)
print(",".join(m for m in ("torch._dynamo", "lightning") if m in sys.modules))
"""


def test_sizing_a_sweeps_jobs_imports_no_compiler_stack() -> None:
    assert heavy_imports(RESOLVED_JOBS) == ""


def heavy_imports(code: str) -> str:
    """The heavy libraries a fresh interpreter has imported after running `code`."""
    proc = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{code}"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_a_sweeps_config_check_and_report_settings_import_no_heavy_library() -> None:
    """Before: a sweep's check of `report.margin`, `report.pairs` and `report.reference` imported the
    pairs' judge, and with it pandas and scipy; and any module of src.report ran the package's
    __init__, which imported the whole analysis (pandas, scipy, matplotlib, MLflow)."""
    assert heavy_imports(BEFORE_THE_FIRST_JOB) == ""


def test_the_claims_format_imports_no_heavy_library() -> None:
    """A file of every kind read and checked: the kinds' checks import no heavy library (their verdict
    rule, with scipy, is imported when a part is judged)."""
    assert heavy_imports(CLAIMS_FORMAT) == ""


# The kinds' names, as the code that would switch on them spells them.
KIND_NAMES = ("DIFFERENCE", "EQUIVALENCE", "EVENT", "TREND", "NO_WORSE", "Kind.", "Asserts.")


def test_no_code_switches_on_a_claims_kind_outside_its_module() -> None:
    """A claim's kind is one module (src/report/kinds/): the format, the judge, the words and the figure
    ask a part's `kind`, never compare its name, so a new kind is one module and its registry entry."""
    owners = {SRC / "report" / "read" / "claims.py", SRC / "stats" / "verdicts.py"}  # the format names the kinds each metric takes
    breaches = []
    for path in sorted((SRC / "report").rglob("*.py")):
        if path in owners or (SRC / "report" / "kinds") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = ast.unparse(node) if isinstance(node, ast.Compare) else ""
            if ".asserts" in text or any(name in text for name in KIND_NAMES):
                breaches.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    assert not breaches, (
        "code outside src/report/kinds/ switches on a claim's kind:\n" + "\n".join(breaches) + "\nFix: give the kinds "
        "a method or attribute for what differs (src/report/kinds/base.py's ClaimKind), override it in the kind that "
        "differs, and call it through `part.kind`."
    )


def test_store_override_reaches_the_report(tmp_path: Path, store_template: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "elsewhere.db"
    shutil.copyfile(store_template, db)  # a store with MLflow's schema made (tests/conftest.py)
    uri = tracking_uri([f"paths.mlflow_db={db}"])
    assert uri == f"sqlite:///{db}" == compose([f"paths.mlflow_db={db}"]).logger.tracking_uri
    client = MlflowClient(uri)
    exp = Store.connect(uri).experiment_id("moved", str(tmp_path / "artifacts"))
    run = client.create_run(exp, run_name="torch_layernorm-s0", tags={"norm": "torch_layernorm", "seed": "0", "outcome": "finished"})
    for key, value in {"train_time_s": 2.0, "avg_tokens_per_sec": 100.0, "test_loss": 5.5, "steps_done": 4.0}.items():
        client.log_metric(run.info.run_id, key, value, step=4)
    client.set_terminated(run.info.run_id, "FINISHED")

    args = ["--experiment-name", "moved", "--no-summary-run", f"paths.mlflow_db={db}", f"paths.reports_dir={tmp_path / 'r'}"]
    assert report_main(args) == 0
    out = capsys.readouterr().out
    assert "torch_layernorm" in out and "5.5000" in out
    assert (tmp_path / "r" / "moved" / "report.md").is_file()


SRC = REPO / "src"
TRACKING = SRC / "tracking"
STORE_MODULE = TRACKING / "store.py"


def _imported_modules(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def _calls_named(tree: ast.AST, name: str) -> int:
    return sum(
        isinstance(node, ast.Call)
        and ((isinstance(node.func, ast.Name) and node.func.id == name)
             or (isinstance(node.func, ast.Attribute) and node.func.attr == name))
        for node in ast.walk(tree)
    )  # fmt: skip


def test_the_store_has_one_door() -> None:
    """Only src/tracking talks to MLflow, only its store module builds a client, and file locks go
    through one library (src.core.atomic_io): no hand-written flock anywhere."""
    sources = sorted(SRC.rglob("*.py"))
    assert STORE_MODULE in sources and len(sources) > 30  # the scan sees the package
    outside, clients, side_doors, flock = [], [], [], []
    for path in sources:
        text = path.read_text()
        tree = ast.parse(text, str(path))
        where = str(path.relative_to(REPO))
        if TRACKING not in path.parents and any(m.split(".")[0] == "mlflow" for m in _imported_modules(tree)):
            outside.append(where)
        if path != STORE_MODULE and _calls_named(tree, "MlflowClient"):
            clients.append(where)
        if path != STORE_MODULE:  # `store.client.x(...)` would skip the store's retries and limits
            side_doors += [f"{where}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "client"]
        if "fcntl" in _imported_modules(tree) or "flock(" in text:
            flock.append(where)
    assert not outside, f"MLflow imported outside src/tracking (use src.tracking.store.Store): {outside}"
    assert not clients, f"MlflowClient built outside src/tracking/store.py: {clients}"
    assert not side_doors, f"the store's MLflow client used outside src/tracking/store.py (add a Store method): {side_doors}"
    assert not flock, f"hand-written file locks (use src.core.atomic_io): {flock}"
    assert _calls_named(ast.parse(STORE_MODULE.read_text()), "MlflowClient") >= 1  # the door itself is found


# What src/tracking may import from MLflow outside the store module: record types, MLflow's own
# system-metrics sampler (given the store's URI), and the probe's one request to a server that is not
# yet a store. Anything else (mlflow.tracking, `import mlflow`'s fluent API) would write around the door.
MLFLOW_OUTSIDE_THE_DOOR = {
    "mlflow.entities": None,  # None: any module of src/tracking
    "mlflow.system_metrics.system_metrics_monitor": "tracker.py",
    "mlflow.utils.credentials": "server_client.py",
    "mlflow.utils.rest_utils": "server_client.py",
    # Serving MLflow's own UI with its start script: the server and its command, writing no run.
    "mlflow.server": "ui_app.py",
    "mlflow.server.fastapi_app": "ui_app.py",
    "mlflow.cli": "ui_app.py",
    # The empty schema a new SQLite store is copied from, made by MLflow's own migrations: no run.
    "mlflow.store.db.utils": "store_template.py",
}


LIGHTNING_WRITES = {"log_metrics", "log_hyperparams", "finalize", "log_graph", "after_save_checkpoint"}


def test_every_mlflow_write_goes_through_the_store() -> None:
    """Outside src/tracking/store.py no module imports more of MLflow than MLFLOW_OUTSIDE_THE_DOOR
    allows, none calls `log_batch` itself (the store applies MLflow's batch limits, once), and none
    lets Lightning's MLFlowLogger write with its own client (`.experiment`, `super().log_metrics()`,
    `super().finalize()`): the run is created, fed and closed through the store, retried."""
    stray, batches, lightning = [], [], []
    for path in sorted(TRACKING.glob("*.py")):
        if path == STORE_MODULE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for module in _imported_modules(tree):
            if module.split(".")[0] == "mlflow" and MLFLOW_OUTSIDE_THE_DOOR.get(module, "-") not in (None, path.name):
                stray.append(f"{path.name}: {module}")
        if _calls_named(tree, "log_batch"):
            batches.append(path.name)
        lightning += [
            f"{path.name}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and (node.attr == "experiment" or (
                node.attr in LIGHTNING_WRITES and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"))
        ]  # fmt: skip
    assert not stray, f"MLflow used around the store (add a Store method): {stray}"
    assert not lightning, f"Lightning's MLflow client writes around the store: {lightning}"
    assert not batches, f"log_batch called outside the store (use Store.log_params / log_metrics*): {batches}"


def _retry_loops(tree: ast.AST) -> int:
    """Loops that catch an exception and sleep before the next try."""
    return sum(
        isinstance(loop, (ast.For, ast.While))
        and any(
            isinstance(handler, ast.ExceptHandler) and _calls_named(handler, "sleep")
            for node in ast.walk(loop) if isinstance(node, ast.Try) for handler in node.handlers
        )
        for loop in ast.walk(tree)
    )  # fmt: skip


def test_one_retry_loop_and_one_atomic_writer() -> None:
    """Retrying on an error is src.tracking.retry's one loop; replacing a file is src.core.atomic_io's."""
    loops, renames = {}, []
    for path in sorted(SRC.rglob("*.py")):
        text, where = path.read_text(), str(path.relative_to(REPO))
        if "sleep" in text and (n := _retry_loops(ast.parse(text, where))):
            loops[where] = n
        if any(token in text for token in ("os.replace(", ".rename(", "shutil.move(")):
            renames.append(where)
    assert loops == {"src/tracking/retry.py": 1}, f"retry loops (use src.tracking.retry.retry): {loops}"
    assert renames == ["src/core/atomic_io.py"], f"files replaced outside src.core.atomic_io (use atomic_write): {renames}"


RUN_OWNER = "src/tracking/run_plan.py"
# What decides a config's fate in the store, and so belongs to the one owner of a run's life: the
# record opened (a Tracker), a run superseded or settled as lost, a run's checkpoint kept aside.
OWNED_CALLS = ("Tracker", "move_aside", "settle_lost", "supersede")
OWNED_TAGS = ("SUPERSEDED_TAG", "LOST")


def _writes_owned_tags(tree: ast.AST) -> bool:
    """A `set_tags(..., {SUPERSEDED_TAG: ...})` or `{OUTCOME_TAG: LOST}` call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_tags":
            names = {n.id for arg in node.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
            if names & set(OWNED_TAGS):
                return True
    return False


def test_a_run_s_life_has_one_owner() -> None:
    """What a run is (done / resume / lost / superseded / new), its record opened, the runs it settles
    or supersedes and the checkpoint it keeps aside are decided in one module; the others ask it."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        where = str(path.relative_to(REPO))
        if where in (RUN_OWNER, "src/core/atomic_io.py"):  # the owner, and move_aside's own definition
            continue
        tree = ast.parse(path.read_text(), where)
        calls = [name for name in OWNED_CALLS if _calls_named(tree, name)]
        if _writes_owned_tags(tree):
            calls.append("set_tags(superseded / lost)")
        if calls:
            found[where] = calls
    assert not found, (
        f"a run's life decided outside {RUN_OWNER}: {found}; ask the owner (add a function there) instead"
    )
    owner = ast.parse((REPO / RUN_OWNER).read_text())
    assert all(_calls_named(owner, name) for name in OWNED_CALLS) and _writes_owned_tags(owner)  # the scan sees it


def _third_party_imports(folder: Path) -> dict[str, list[str]]:
    """Top-level names of the non-standard-library modules imported under `folder` -> the files."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"src", "__future__"}:
                found.setdefault(top, []).append(str(path.relative_to(REPO)))
    return found


def test_every_import_of_the_package_is_declared() -> None:
    """A module the package imports is a dependency of pyproject.toml (or of one of its extras), not
    something that happens to arrive with another package."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from importlib.metadata import packages_distributions

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *(s for extra in project["optional-dependencies"].values() for s in extra)]
    declared = {canonicalize_name(Requirement(spec).name) for spec in specs}
    owners = packages_distributions()
    imports = _third_party_imports(SRC)
    assert {"torch", "mlflow", "pandas"} <= imports.keys()  # the scan sees the package's imports
    undeclared = {
        top: files
        for top, files in imports.items()
        if not {canonicalize_name(d) for d in owners.get(top, [top])} & declared
    }
    assert not undeclared, f"imported by src/ but not declared in pyproject.toml: {undeclared}"


# A verdict word (a pair's, a speed verdict's, a claim's, a sequential sweep's decision) is decided by
# one module, src/stats/verdicts.py, with no exemption: the sequential sweeper's decisions are its
# Enum too (SequentialWord), spent over the looks in src/stats/sequential.py.
VERDICT_MODULE = SRC / "stats" / "verdicts.py"
PHRASES_MODULE = SRC / "report" / "numbers.py"  # the verdicts' phrases (equivalent within ±m, what would settle it)


def _spelled_words(path: Path, words: set[str]) -> list[str]:
    """Where a file spells a verdict word itself: a string equal to one, or an f-string piece that
    starts with one as a verdict does (`inconclusive (`, `equivalent within ±`, `slower:`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)}  # fmt: skip
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue
        text = node.value.strip()
        if any(text == w or text.startswith((f"{w} (", f"{w}:", f"{w} within ±")) for w in words):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    return found


def test_one_module_decides_every_verdict_word() -> None:
    from src.stats.verdicts import ClaimWord, PairWord, SequentialWord, SpeedWord

    words = {w.value for kind in (PairWord, SpeedWord, ClaimWord, SequentialWord) for w in kind}
    words |= {w.label for w in SequentialWord}
    breaches = [hit for path in sorted(SRC.rglob("*.py")) if path not in (VERDICT_MODULE, PHRASES_MODULE) for hit in _spelled_words(path, words)]
    assert not breaches, (
        "a verdict word is spelled outside src/stats/verdicts.py:\n" + "\n".join(breaches) + "\nFix: let "
        "src.stats.verdicts decide it (decide_pair/pair_word/speed_word for a pair or a speed check, read/judge_interval/"
        "claim_word/judge_event for a claim, SequentialWord for a sequential sweep's look) and print the Enum it "
        "returns (PairWord, SpeedWord, ClaimWord, SequentialWord) or its phrases (src.report.numbers: equivalent_text, settle_text); "
        "never compare with or return the word as a string."
    )


# What decides a word besides the word itself: the family adjustment (Holm, Bonferroni), the level a
# test is taken at (α and what is made of it), the margin's scale, the seeds that would settle it.
# Each is computed in src/stats/verdicts.py (the tests themselves live in src/stats/inference.py).
DECIDING_CALLS = {"holm", "tost", "needed", "power_difference", "power_equivalence", "sign_flip_p", "fisher_exact"}
STATS_HOME = {VERDICT_MODULE, SRC / "stats" / "inference.py"}


def _deciding(path: Path) -> list[str]:
    """Where a file decides for itself: calls a deciding test, makes a level of α (ALPHA / k, 1 - ALPHA),
    or turns a margin into log scale (log1p of a margin)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in DECIDING_CALLS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: calls {name}")
            if name == "log1p" and any("margin" in ast.unparse(a) for a in node.args):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: a margin's scale ({ast.unparse(node)})")
        if isinstance(node, ast.BinOp) and any(isinstance(x, ast.Name) and x.id == "ALPHA" for x in (node.left, node.right)):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: a level made of α ({ast.unparse(node)})")
    return found


def test_no_margin_alpha_or_family_is_decided_outside_the_verdict_module() -> None:
    breaches = [hit for path in sorted(SRC.rglob("*.py")) if path not in STATS_HOME for hit in _deciding(path)]
    assert not breaches, (
        "a family adjustment, a level of α, a margin's scale or a test that decides a word is computed outside "
        "src/stats/verdicts.py:\n" + "\n".join(breaches) + "\nFix: call the verdict module's function for it "
        "(decide_family for a family of pairs, family_alpha for a claim family, speed_margin for a speed margin, "
        "settle for the seeds that would settle it) and pass it α, never a level of your own."
    )




# A judgement's words and reasons travel as data (src.stats.verdicts' Judgement, Decision, SequentialWord);
# the modules that judge and write never read them back out of a sentence.
JUDGING_AND_WRITING = ("judge", "kinds", "words", "render")  # folders of src/report
PROSE_SEPARATORS = ("(", ":", ";", " vs ")


def _parses_prose(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name == "re" for a in node.names) | (getattr(node, "module", "") == "re"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: imports re")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("split", "rsplit", "partition", "rpartition")
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and any(s in node.args[0].value for s in PROSE_SEPARATORS)):  # fmt: skip
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_parses_a_judgement_back_out_of_its_prose() -> None:
    modules = sorted(path for folder in JUDGING_AND_WRITING for path in (SRC / "report" / folder).glob("*.py"))
    assert len(modules) > len(JUDGING_AND_WRITING), "the report's judge/, words/ and render/ folders moved: name them here"
    breaches = [hit for path in modules for hit in _parses_prose(path)]
    assert not breaches, (
        "a judging or writing module reads a fact back out of a sentence:\n" + "\n".join(breaches) + "\nFix: carry the "
        "fact as data beside its text (a Judgement's because/here, a DomainFact's fact, a look's a/b/metric) and write "
        "the sentence from it."
    )
