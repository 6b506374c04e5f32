"""What a job costs on another Python interpreter with the same packages, against this one.

    python -m src.bench interpreter --python /path/to/other/venv/bin/python [--pairs 6]

Every process of a sweep, and every test's, pays its imports (torch, Lightning, MLflow, Hydra:
seconds of CPU) before it does anything of its own, and that work is the interpreter's: how it was
built matters as much as what it runs. pyenv builds CPython with a shared libpython and, by default,
without `--enable-optimizations`; Debian's `python3` links libpython into the executable and is
Debian's optimised build (docs/benchmarks.md, "The interpreter", has the two measured).

Each pair runs the overhead bench's tiny job (`python -m src.train` on a one-layer GPT-2 of width 32,
one step, two validation and two test batches: src/bench/overhead.py's `tiny_job`) once on each interpreter,
their order swapped every pair, each into a fresh copy of one migrated store, and reads each
process's CPU (user + system, its children's included). One untimed job on each first makes the
token cache and the store, and finds a broken interpreter before anything is timed. Printed: each
pair's CPU and the other / this ratio, the geometric mean over pairs with a 95% t-interval on the
logs. The other interpreter's environment needs this project's dependencies at the same versions
(`<python> -m pip install -e '.[dev]'` in a venv of its own). Results: the console and
`<out>/interpreter.{json,md}`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from src.bench.files import add_report_options, cells, say_and_write
from src.bench.overhead import bench_env, ratio, ratio_text, tiny_job
from src.core import cli
from src.core.paths import PROJECT_ROOT
from src.core.tables import markdown_table


def interpreter(text: str) -> Path:
    """`--python`: an executable file (argparse names the option in the error)."""
    path = Path(text).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text} is not an executable file: give another environment's python (e.g. other-venv/bin/python)")
    return path


def job_command(python: Path, folder: Path, cache: Path, store: Path) -> list[str]:
    return [
        str(python), "-m", "src.train", *tiny_job(), f"paths.cache_dir={cache}", f"paths.mlflow_db={store}",
        f"paths.mlflow_artifacts={folder / 'mlartifacts'}", f"paths.checkpoints_dir={folder / 'checkpoints'}",
        f"paths.reports_dir={folder / 'reports'}", f"hydra.run.dir={folder / 'outputs'}",
    ]  # fmt: skip


def cpu_of(command: list[str], env: dict[str, str]) -> float:
    """The CPU seconds (user + system) of one job and the processes it waited for; SystemExit naming
    the interpreter if the job failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"error: the tiny job failed on {command[0]} (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = bench_env(args.threads)
    pythons = {"this": Path(sys.executable).absolute(), "other": args.python.absolute()}
    work = Path(tempfile.mkdtemp(prefix="normsweep-interpreter-"))
    cpu: dict[str, list[float]] = {"this": [], "other": []}
    try:
        cache = work / "cache"
        stores: dict[Path, Path] = {}  # each interpreter's migrated store, made by its untimed first job
        for name, python in pythons.items():  # untimed: the token cache, the store, a broken environment
            if python not in stores:
                stores[python] = work / f"{name}.db"
                cpu_of(job_command(python, work / f"warm-{name}", cache, stores[python]), env)
        for pair in range(args.pairs):
            for name in ("this", "other") if pair % 2 == 0 else ("other", "this"):
                folder = work / f"p{pair}-{name}"
                folder.mkdir()
                store = folder / "mlflow.db"
                shutil.copyfile(stores[pythons[name]], store)
                cpu[name].append(cpu_of(job_command(pythons[name], folder, cache, store), env))
                shutil.rmtree(folder, ignore_errors=True)
            print(f"pair {pair + 1}/{args.pairs}: this {cpu['this'][-1]:.2f} s, other {cpu['other'][-1]:.2f} s of CPU", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "this": str(pythons["this"]),
        "other": str(pythons["other"]),
        "versions": {name: version(python) for name, python in pythons.items()},
        "pairs": args.pairs,
        "threads": args.threads,
        "cpu_s": cpu,
        "other_over_this": ratio(cpu["other"], cpu["this"]),
    }


def version(python: Path) -> str:
    """The interpreter's version and build line, as it says it."""
    said = subprocess.run([str(python), "-c", "import sys; print(sys.version.replace(chr(10), ' '))"], capture_output=True, text=True)
    return said.stdout.strip()


def to_markdown(report: dict[str, Any]) -> str:
    columns = ["pair", "this (s)", "other (s)", "other / this"]
    rows = [
        {"pair": i + 1, "this (s)": this, "other (s)": other, "other / this": f"{other / this:.2f}"}
        for i, (this, other) in enumerate(zip(report["cpu_s"]["this"], report["cpu_s"]["other"], strict=True))
    ]
    return "\n".join([
        f"# A tiny job's CPU on two interpreters ({report['pairs']} interleaved pairs; 95% interval)",
        "",
        f"- this: {report['this']} ({report['versions']['this']})",
        f"- other: {report['other']} ({report['versions']['other']})",
        "",
        markdown_table(columns, cells(rows, columns)),
        "",
        f"other / this: {ratio_text(report['other_over_this'])}",
    ])  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--python", type=interpreter, required=True, help="the other environment's python (its own venv, this project's dependencies)")
    parser.add_argument("--pairs", type=cli.int_option(1), default=6, help="interleaved pairs (default 6; an interval needs 2)")
    add_report_options(parser)


def main(args: argparse.Namespace) -> dict[str, Any]:
    report = run(args)
    say_and_write(args, "interpreter", report, to_markdown(report))
    return report
