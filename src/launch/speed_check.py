"""The speed comparison a sweep reports, measured where it can be seen: after the jobs, every swept
variant's norm forward+backward at the run's shapes (`report.speed_kernel_s` seconds, one whole step of
the reference in every round: the denominator of a share, timed under the round's own load), then its
training step, each timed in interleaved rounds in one process (`python -m src.bench variants`).
The first predicts each pair's step-time difference; the second checks it (src/report/judge/speed.py).

Sequential jobs on a shared machine measure its load between jobs (the same machine gave 566 and
1,485 tok/s minutes apart), so the report replaces their speed ratios by this run's, which lands in
the sweep's experiment as a `bench-variants` run. Off unless `report.speed_rounds` > 0 (the study's
`experiment=norm_sweep` sets it); nothing here may fail the sweep.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from src.core.paths import PROJECT_ROOT, user_config_dirs
from src.core.progress import PREFIXES
from src.core.terminal import fit, say
from src.tracking.store import Store
from src.tracking.summary import sweep_params
from src.tracking.sweep import Lock, kept_fresh, take_lock
from src.tracking.tags import BENCH_TAG, SWEEP_TAG

VARIANT_KEY = "norm"
# Overrides of the sweep's command that the benchmark must not get: the swept ones, and what is
# per-job or per-run only (the bench composes the training config from the rest: model, precision, ...).
MIN_TIMEOUT_S = 300.0  # the speed check may take as long as the jobs did, and at least this (a loaded machine)
SPEED_CLAIM = "speed-check"  # the claim's key in the experiment: one check at a time, whichever copy runs it
CLAIM_POLL_S = 2.0  # how often a waiting copy asks for the claim again
CLAIM_REFRESHES = 3  # the holder writes its claim's time this many times per sweep.stale_after_s
NOT_FOR_BENCH = (VARIANT_KEY, "seed", "hydra.", "++hydra.", "+hydra.", "run_name")


def _say(line: str, stream: TextIO | None = None) -> None:
    """One line of the check's progress, wrapped to a terminal's width."""
    print(*fit([line]), sep="\n", file=stream or sys.stdout, flush=True)


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def swept_variants(jobs: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """variant -> the swept overrides (seed aside) that make it, in the sweep's order: each job's
    `variant` (src.launch.callbacks), else its overrides."""
    swept = {key[len("sweep.") :] for key in sweep_params(jobs)} - {"seed"}
    out: dict[str, list[str]] = {}
    for job in jobs:
        own = [o for o in job.get("overrides", []) if _key(o) in swept]
        out.setdefault(str(job.get("variant") or " ".join(own)), own)
    return out


def bench_command(
    jobs: Sequence[Mapping[str, Any]], rounds: int, out_dir: Path, kernel_s: float | None = None,
    share: tuple[Sequence[str], int] = ((), 0),
) -> list[str] | None:
    """`python -m src.bench variants ...` for the variants of `jobs`, or None when fewer than two:
    `--variants a,b` when the sweep varied the norm alone, else each variant built from its overrides;
    with `share` (model sizes, rounds: a chosen trend claim's) each norm's share of a step at those sizes too."""
    variants = swept_variants(jobs)
    if len(variants) < 2 or rounds < 2:
        return None
    swept = {_key(o) for own in variants.values() for o in own}
    shared = [o for o in jobs[0].get("overrides", []) if all(not o.startswith(p) for p in NOT_FOR_BENCH)]
    shared = [o for o in shared if _key(o) not in swept and f"sweep.{_key(o)}" not in sweep_params(jobs)]
    from src.core.norm_yamls import builtin_variants

    norms = [o.partition("=")[2] for own in variants.values() for o in own]
    if swept == {VARIANT_KEY} and set(norms) <= set(builtin_variants()):
        chosen = ["--variants", ",".join(norms)]
    else:
        chosen = ["--variant-overrides", json.dumps(variants)]
    bench = [*chosen, "--rounds", str(rounds), "--out", str(out_dir)]
    if kernel_s is not None:
        bench += ["--kernel-seconds", f"{kernel_s:g}"]
    sizes, share_rounds = share
    if sizes and share_rounds:
        bench += ["--share-sizes", ",".join(sizes), "--share-rounds", str(share_rounds)]
    return [sys.executable, "-m", "src.bench", "variants", *bench, *shared, *searchpath_override()]


def searchpath_override() -> list[str]:
    """The sweep's config folders of the user's (`--config-dir`, `hydra.searchpath`), as the override
    the benchmark composes with: a norm YAML of the user's is found there, as the jobs found it."""
    dirs = [f"file://{folder}" for folder in user_config_dirs()]
    return [f"hydra.searchpath=[{','.join(dirs)}]"] if dirs else []


def current_check(store: Store, experiment_id: str, variants: Sequence[str]) -> str | None:
    """When the experiment's latest speed check already measured these variants and no training run
    finished after it started, that check's start time (it still describes every result); else None.
    A sweep re-run whose jobs were all done then keeps its check instead of recording another."""
    from src.report.read.runs import (  # late: the report's readers import pandas
        latest_speed_check,
        read_speed_check,
    )

    check = latest_speed_check(store, experiment_id)
    if check is None or sorted(read_speed_check(store, check).get("settings", {}).get("variants", [])) != sorted(variants):
        return None
    started = check.info.start_time
    newer = store.runs(experiment_id, f"attributes.status = 'FINISHED' and attributes.end_time > {started}")
    if any(BENCH_TAG not in r.data.tags and SWEEP_TAG not in r.data.tags for r in newer):
        return None
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(started / 1000))


def take_speed_claim(store: Store, experiment_id: str, stale_after_s: float, wait_s: float) -> Lock | None:
    """The experiment's speed-check claim (`src.tracking.sweep.take_lock`, as a job takes its config's),
    waiting up to `wait_s` while another copy of the sweep holds it; None: it still did (skipped).

    Two checks at once measure each other's load (51 s and 37 s against 29 s alone), so a copy
    re-run during another's check waits for it, then keeps its result (`current_check`)."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        held, why = take_lock(store, experiment_id, SPEED_CLAIM, stale_after_s)
        if held is not None:
            return held
        if time.monotonic() >= deadline:
            _say(f"[normsweep] speed: skipped: another copy of the sweep is still measuring it after {wait_s:.0f} s "
                 f"({why}); the report reads its bench-variants run once it ends")  # fmt: skip
            return None
        if not said:
            _say(f"[normsweep] speed: waiting for the speed check another copy of the sweep is running ({why}), "
                 f"at most {wait_s:.0f} s; then its result is kept, not measured twice at once")  # fmt: skip
            said = True
        time.sleep(CLAIM_POLL_S)


def run_speed_check(
    jobs: Sequence[Mapping[str, Any]], rounds: int, out_dir: Path, timeout_s: float, kernel_s: float | None = None,
    store: Store | None = None, experiment_id: str | None = None, stale_after_s: float | None = None,
    share: tuple[Sequence[str], int] = ((), 0),
) -> None:
    """Run the benchmark (its files go to `out_dir`, its results to the experiment); warn on failure.

    With a store, under the experiment's speed-check claim (`stale_after_s`: `sweep.stale_after_s`),
    waited for at most as long as the check itself may take (`timeout_s`)."""
    command = bench_command(jobs, rounds, out_dir, kernel_s, share)
    if command is None:
        return
    if store is None or experiment_id is None or stale_after_s is None:
        _measure(command, jobs, rounds, timeout_s, kernel_s)
        return
    held = take_speed_claim(store, experiment_id, stale_after_s, timeout_s)
    if held is None:
        return
    with kept_fresh(held, stale_after_s / CLAIM_REFRESHES):
        kept = current_check(store, experiment_id, list(swept_variants(jobs)))
        if kept:
            _say(f"[normsweep] speed: kept the check of {kept} (no run finished since); delete its bench-variants run to measure again")
            return
        _measure(command, jobs, rounds, timeout_s, kernel_s)


def _measure(command: list[str], jobs: Sequence[Mapping[str, Any]], rounds: int, timeout_s: float, kernel_s: float | None) -> None:
    """The benchmark in its own process, stopped after `timeout_s`, its progress (rounds done, time
    left) printed as it comes: a failure is a warning, never the sweep's."""
    kernel = f"{kernel_s:g} s of their norms' kernels, then " if kernel_s else ""
    _say(f"[normsweep] speed: {kernel}{rounds} interleaved rounds of {','.join(swept_variants(jobs))} (at most {timeout_s:.0f} s)")
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=errors, text=True)
        # The timeout holds while the benchmark is silent too (reading its output blocks).
        timer = threading.Timer(timeout_s, process.kill)
        timer.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith(PREFIXES):  # the benchmark's progress, passed on as it comes
                    _say(f"[normsweep] speed: {line.rstrip()}")
            code = process.wait()
        finally:
            timer.cancel()
        if time.perf_counter() - started >= timeout_s and code != 0:
            _say(f"[normsweep] warning: speed check stopped after {timeout_s:.0f} s (as long as the jobs took)", sys.stderr)
            return
        if code != 0:
            errors.seek(0)
            _say(f"[normsweep] warning: speed check failed ({code}): {errors.read()[-500:]}", sys.stderr)
            return
    say(f"[normsweep] speed check took {time.perf_counter() - started:.0f} s")
