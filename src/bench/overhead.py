"""The tool's own cost against the floor a bare Hydra + Lightning + MLflow sweep sets, side by side.

    python -m src.bench overhead [--jobs 10,100] [--rounds 2] [--threads T]

For each N in `--jobs`, each round runs two real multiruns of N one-step jobs of a tiny GPT-2 (one
per seed, each into a fresh SQLite store), their order swapped every round so that a burst of load
lands on both alike:

- **normsweep**: `python -m src.train -m seed=range(0,N)` with its checks, store bookkeeping, token
  cache, record and report (the speed check off: it measures the norms, not the tool);
- **the floor** (`python -m src.bench.floor`): a bare Hydra multirun whose task runs one bare
  Lightning fit and test of the same model and steps, logged by Lightning's MLFlowLogger.

Both carry the same Hydra callback (src/bench/clock.py), which notes when each job starts and ends.
Per job, from that clock and the runs' own `train_time_s`:

- *before the first job*: process start to the first job's start, over N (imports, composition,
  the checks before launch, the store opened);
- *outside training*: the first job's start to the last one's end, over N, less the mean training
  time (the data, the run's record, the test, the next job's composition);
- *all but training*: process start to the last job's end, over N, less the mean training time
  (where a cost falls, before the first job or in it, differs: the floor opens its store in job 0);
- *report*: the last job's end to the process's exit (the report; the floor has none).

Ratios normsweep / floor are the geometric mean over rounds of each round's ratio, with a 95%
t-interval on their logs (two rounds or more); the growth from the smallest N to the largest
compares normsweep's per-job figures (flat: linear in N). normsweep's config loads per job are
counted (the compositions Hydra made, src/core/compositions.py's count, in the timed process). Results: the console and `<out>/overhead.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from src.bench.clock import CLOCK_ENV
from src.bench.files import add_report_options, cells, say_and_write
from src.core import cli
from src.core.paths import PROJECT_ROOT
from src.core.tables import markdown_table

TINY = {  # the floor's keys -> normsweep's: one tiny GPT-2, one step, two validation and test batches
    "n_layers": ("model.n_layers", 1),
    "emb_dim": ("model.emb_dim", 32),
    "n_heads": ("model.n_heads", 2),
    "context_length": ("model.context_length", 32),
    "batch": ("optim.micro_batch_size", 4),
    "steps": ("optim.max_steps", 1),
    "val_every": ("val_every_n_steps", 1),
}
WINDOWS = 2  # validation and test batches of either
CLOCK = "+hydra.callbacks.bench_clock._target_=src.bench.clock.Clock"
# The timed normsweep process counts Hydra's full compositions and prints the count as it exits.
COUNTED_TRAIN = """
import atexit, runpy, sys
from src.core import compositions
said = lambda n: n is not None and print(f"normsweep-config-loads {n}", file=sys.stderr)
atexit.register(lambda: said(compositions.made()))
sys.argv = ["src.train", *sys.argv[1:]]
runpy.run_module("src.train", run_name="__main__")
"""


def tiny_job() -> list[str]:
    """normsweep's overrides for the tiny job (TINY, WINDOWS), quiet: what the benches time."""
    values = [f"{key}={value}" for key, value in TINY.values()]
    return [*values, "progress_bar=false", f"data.val_max_windows={WINDOWS}", f"data.test_max_windows={WINDOWS}"]


def bench_env(threads: int | None) -> dict[str, str]:
    """The environment of a timed subprocess: this one's, with Hydra's and Python's warnings short, no
    tracking server of the caller's, and Python's bytecode cache as a user has it (on by default: a
    shell that turns it off made every timed sweep compile normsweep's ~150 modules again, ~0.4 s of
    CPU a sweep, and the floor's few)."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def tool_command(n: int, folder: Path, cache: Path) -> list[str]:
    return [
        sys.executable, "-c", COUNTED_TRAIN, "-m", *tiny_job(), "report.speed_rounds=0", f"seed=range(0,{n})",
        "experiment_name=overhead", f"paths.cache_dir={cache}", f"paths.mlflow_db={folder / 'mlflow.db'}",
        f"paths.mlflow_artifacts={folder / 'mlartifacts'}", f"paths.reports_dir={folder / 'reports'}",
        f"paths.checkpoints_dir={folder / 'checkpoints'}", f"hydra.sweep.dir={folder / 'multirun'}", CLOCK,
    ]  # fmt: skip


def floor_command(n: int, folder: Path) -> list[str]:
    values = [f"{key}={value}" for key, (_, value) in TINY.items()]
    return [
        sys.executable, "-m", "src.bench.floor", "-m", *values, f"windows={WINDOWS}", f"seed=range(0,{n})",
        f"tracking_uri=sqlite:///{folder / 'mlflow.db'}", f"hydra.sweep.dir={folder / 'multirun'}", CLOCK,
    ]  # fmt: skip


def train_times(db: Path) -> list[float]:
    """Every run's `train_time_s` in the store (its sweep's parent run has none)."""
    from src.tracking.store import Store

    store = Store.connect(f"sqlite:///{db}")
    runs = [run for e in store.experiments() for run in store.runs(e.experiment_id)]
    return [r.data.metrics["train_time_s"] for r in runs if "train_time_s" in r.data.metrics]


def timed_sweep(command: list[str], folder: Path, n: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one sweep; its per-job figures (seconds), or SystemExit naming what failed."""
    folder.mkdir(parents=True)
    clock = folder / "clock.jsonl"
    start = time.time()
    proc = subprocess.run(command, cwd=PROJECT_ROOT, env={**env, CLOCK_ENV: str(clock)}, capture_output=True, text=True)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"error: a timed sweep failed (exit {proc.returncode}): {' '.join(command[-3:])}: {proc.stderr.strip()[-600:]}")
    events = [json.loads(line) for line in clock.read_text().splitlines()]
    starts = [e["t"] for e in events if e["event"] == "job_start"]
    ends = [e["t"] for e in events if e["event"] == "job_end"]
    trained = train_times(folder / "mlflow.db")
    if len(starts) != n or len(trained) != n:
        raise SystemExit(f"error: a timed sweep ran {len(starts)} jobs and recorded {len(trained)} of {n}")
    marker = "normsweep-config-loads "
    loads = proc.stderr.rpartition(marker)[2].split() if marker in proc.stderr else []
    return {
        "before_first_job_s": (min(starts) - start) / n,
        "outside_training_s": (max(ends) - min(starts)) / n - sum(trained) / n,
        "training_s": sum(trained) / n,
        "all_but_training_s": (max(ends) - start) / n - sum(trained) / n,
        "report_s": end - max(ends),
        "config_loads_per_job": int(loads[0]) / n if loads else None,
    }


def ratio(tool: list[float], floor: list[float]) -> dict[str, float]:
    """Geometric mean of the per-round ratios, with a 95% t-interval on their logs (NaN below two rounds)."""
    from src.stats.inference import mean_ci

    logs = [math.log(t / f) for t, f in zip(tool, floor, strict=True) if t > 0 and f > 0]
    est = mean_ci(logs)
    return {"ratio": math.exp(est.mean), "low": math.exp(est.low), "high": math.exp(est.high)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = bench_env(args.threads)
    work = Path(tempfile.mkdtemp(prefix="normsweep-overhead-"))
    measured: dict[int, dict[str, list[dict[str, Any]]]] = {n: {"normsweep": [], "floor": []} for n in args.jobs}
    try:
        cache = work / "cache"  # the token cache made once, untimed: a one-time cost of any corpus
        timed_sweep(tool_command(1, work / "warm", cache), work / "warm", 1, env)
        for r in range(args.rounds):
            for n in args.jobs:
                kinds = ["normsweep", "floor"] if r % 2 == 0 else ["floor", "normsweep"]
                for kind in kinds:
                    folder = work / f"r{r}-n{n}-{kind}"
                    command = tool_command(n, folder, cache) if kind == "normsweep" else floor_command(n, folder)
                    measured[n][kind].append(timed_sweep(command, folder, n, env))
                    shutil.rmtree(folder, ignore_errors=True)
                    print(f"round {r + 1}/{args.rounds}, {n} jobs, {kind}: {measured[n][kind][-1]['outside_training_s']:.2f} s a job outside training", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for n, kinds in measured.items():
        tool, floor = kinds["normsweep"], kinds["floor"]
        row: dict[str, Any] = {"jobs": n}
        for key in ("before_first_job_s", "outside_training_s", "all_but_training_s", "training_s"):
            row[f"{key} normsweep"] = sum(m[key] for m in tool) / len(tool)
            row[f"{key} floor"] = sum(m[key] for m in floor) / len(floor)
            row[f"{key} ratio"] = ratio([m[key] for m in tool], [m[key] for m in floor])
        row["report_s normsweep"] = sum(m["report_s"] for m in tool) / len(tool)
        row["config_loads_per_job"] = tool[0]["config_loads_per_job"]
        rows.append(row)
    small, large = rows[0], rows[-1]
    growth = {
        key: large[f"{key} normsweep"] / small[f"{key} normsweep"]
        for key in ("before_first_job_s", "outside_training_s", "all_but_training_s")
        if small[f"{key} normsweep"] > 0
    }
    return {"rounds": args.rounds, "jobs": args.jobs, "threads": args.threads, "rows": rows, "growth": growth, "raw": measured}


def ratio_text(r: dict[str, float]) -> str:
    """`ratio`'s result as the benches print it: the ratio, and its interval where there is one."""
    if math.isnan(r["low"]):
        return f"{r['ratio']:.2f}×"
    return f"{r['ratio']:.2f}× [{r['low']:.2f}, {r['high']:.2f}]"


def to_markdown(report: dict[str, Any]) -> str:
    columns = ["jobs", "per job", "normsweep (s)", "floor (s)", "normsweep / floor"]
    lines = []
    for row in report["rows"]:
        for key, what in (
            ("before_first_job_s", "before the first job"), ("outside_training_s", "outside training"),
            ("all_but_training_s", "all but training"), ("training_s", "training"),
        ):  # fmt: skip
            lines.append({
                "jobs": row["jobs"], "per job": what, "normsweep (s)": row[f"{key} normsweep"],
                "floor (s)": row[f"{key} floor"], "normsweep / floor": ratio_text(row[f"{key} ratio"]),
            })  # fmt: skip
        lines.append({"jobs": row["jobs"], "per job": "config loads (Hydra's)", "normsweep (s)": row["config_loads_per_job"], "floor (s)": None, "normsweep / floor": ""})
        lines.append({"jobs": row["jobs"], "per job": "the report (once, s)", "normsweep (s)": row["report_s normsweep"], "floor (s)": None, "normsweep / floor": ""})
    growth = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} ×{v:.2f}" for k, v in report["growth"].items())
    jobs = report["jobs"]
    return "\n".join([
        f"# The tool's own cost against the floor ({report['rounds']} interleaved rounds; 95% intervals)",
        "",
        markdown_table(columns, cells(lines, columns)),
        "",
        f"normsweep's per-job cost from {jobs[0]} to {jobs[-1]} jobs: {growth or 'one size only'} (1.00: linear in the jobs).",
    ])  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=cli.int_list_option(1), default=[10, 100], help="sweep sizes, comma-separated (default 10,100)")
    parser.add_argument("--rounds", type=cli.int_option(1), default=2, help="interleaved rounds per size (default 2; an interval needs 2)")
    add_report_options(parser)


def main(args: argparse.Namespace) -> dict[str, Any]:
    report = run(args)
    say_and_write(args, "overhead", report, to_markdown(report))
    return report
