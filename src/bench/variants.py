"""Training-step speed of several norm variants, interleaved in one process so drift hits all alike.

    python -m src.bench variants [--variants a,b,...] [--rounds R] [training overrides ...]

Every variant is built from the training config (`model=cpu_small` by default, `model=gpt2_small
precision=bf16_mixed cluster=gpu` on a GPU) with the same initial weights: one seed, and every
weight the variants share copied from the first, so only the norm differs. Each then trains on the
same random-token batches; after `--warmup` untimed steps each, `--rounds` rounds time one full
step (forward, backward, clipping, AdamW, schedule) of every variant, the order rotating each round.
On a shared machine a burst of foreign load then lands on every variant of that round alike, and a
per-round ratio cancels it. Reported per variant:

- the median step time with a 95% bootstrap interval;
- the ratio to REFERENCE_VARIANT's step time (src.tracking.variants): median of the per-round ratios, with its interval;
- the norm's own cost, step(variant) - step(no_norm) per round, and its share of the step.

Results go to the console, `<out>/variants.json` and `.md`, and an MLflow run `bench-variants` in
the experiment, which `python -m src.report` shows as the "interleaved speed" column.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from src.bench.common import synchronize
from src.bench.files import default_out_dir, parse_list, write_report
from src.bench.kernels import cpu_threads, kernel_check, load
from src.bench.norms import SKIPPED
from src.bench.shares import norm_share_rounds
from src.core import cli
from src.core.norm_yamls import known_variants
from src.core.paths import ConfigError, preset_norms
from src.core.progress import PROGRESS_S, STEPS, say
from src.core.schema import ReportSchema
from src.core.tables import markdown_table
from src.model.gpt import GPTModel
from src.report.judge.pairs import pairs_for
from src.report.judge.speed import compare_speed, norm_shares
from src.report.read.settings import settings
from src.report.words.speed import share_where, speed_lines
from src.stats.inference import Interval, median_interval
from src.tracking.environment import environment_tags
from src.tracking.git import git_state
from src.tracking.identity import flatten
from src.tracking.store import Store
from src.tracking.sweep import PARENT_ENV
from src.tracking.tags import (
    BENCH_RUN_NAME,
    BENCH_TAG,
    BENCH_VARIANTS,
    GIT_COMMIT_TAG,
    PARENT_TAG,
    SPEED_CHECK_RUN_NAME,
)
from src.tracking.variants import REFERENCE_VARIANT, metric_key
from src.training.steps import TrainStep, bench_config, build_module, device_of, random_batches

BASELINE = "no_norm"  # the norm's cost is a step's time minus the identity's
N_BATCHES = 4  # distinct random batches, cycled: the same for every variant
STEP_ROUNDS = 1000  # the schedule's length: room for one reference step per kernel round (the budget ends them first)
STUDY_PRESET = "norm_sweep"  # without --variants: the norms this preset sweeps (the study's five)


def parse_variants(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    known = known_variants()
    unknown = [v for v in names if v not in known]
    if unknown:
        raise ConfigError(f"--variants: unknown variant(s) {', '.join(unknown)}; valid choices: {', '.join(known)}")
    if len(set(names)) != len(names) or not names:
        raise ConfigError(f"--variants: name each variant once, got {names}")
    return names


def share_weights(models: dict[str, GPTModel]) -> None:
    """Copy every tensor the variants share (same name and shape) from the first model into the others.

    The same seed already gives the same weights when no norm draws random numbers; copying makes
    it hold whatever a norm's initialisation does, so the variants differ in the norm alone.
    """
    first, *others = models.values()
    reference = first.state_dict()
    for model in others:
        own = model.state_dict()
        shared = {k: v for k, v in reference.items() if k in own and own[k].shape == v.shape}
        model.load_state_dict(shared, strict=False)


def build_variants(overrides: list[str], variants: list[str] | dict[str, list[str]], batch: int | None, steps: int, seed: int) -> tuple[
    dict[str, TrainStep], dict[str, GPTModel], DictConfig
]:  # fmt: skip
    """One TrainStep per variant (norm keys, or name -> its own overrides), all from the same config and initial weights."""
    if not isinstance(variants, dict):
        variants = {v: [f"norm={v}"] for v in variants}
    configs = {v: bench_config([*overrides, *own], batch, steps) for v, own in variants.items()}
    modules = {v: build_module(cfg, seed)[0] for v, cfg in configs.items()}
    models = {v: m.model for v, m in modules.items()}
    share_weights(models)
    first = next(iter(configs.values()))
    device = device_of(first)
    return {v: TrainStep(modules[v], configs[v], device) for v in variants}, models, first


def reference_step(step: TrainStep, batches: list) -> Callable[[], None]:
    """One whole step of the reference per call, the batches cycled: the kernel rounds' denominator."""
    calls = itertools.count()

    def run() -> None:
        step(*batches[next(calls) % len(batches)])

    return run


def time_rounds(steps: dict[str, TrainStep], batches: list, warmup: int, rounds: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds per step of each variant, one step each per round, the order rotating every round."""
    names = list(steps)
    for name in names:
        for i in range(warmup):
            steps[name](*batches[i % len(batches)])
    synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in names}
    started = said = time.perf_counter()
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            x, y = batches[(warmup + r) % len(batches)]
            synchronize(device)
            t0 = time.perf_counter()
            steps[name](x, y)
            synchronize(device)
            samples[name].append(time.perf_counter() - t0)
        now = time.perf_counter()
        if now - said >= PROGRESS_S or r + 1 == rounds:  # rounds done and time left, as training's bar gives them
            said = now
            left = (now - started) / (r + 1) * (rounds - r - 1)
            say(STEPS, f"round {r + 1}/{rounds}, {now - started:.0f} s, ~{left:.0f} s left")
    return samples


def summarize(samples: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per variant: median step (ms), ratio to REFERENCE_VARIANT and the norm's cost, with intervals."""
    out: dict[str, dict[str, Any]] = {}
    # Against REFERENCE_VARIANT; a sweep of other axes against its first variant.
    ref, base = samples.get(REFERENCE_VARIANT, next(iter(samples.values()))), samples.get(BASELINE)
    for name, times in samples.items():
        row: dict[str, Any] = {"step_ms": _scaled(median_interval(times), 1e3)}
        if ref is not None:
            row["ratio"] = asdict(median_interval([t / r for t, r in zip(times, ref, strict=True)]))
        if base is not None:
            cost = _scaled(median_interval([t - b for t, b in zip(times, base, strict=True)]), 1e3)
            row["norm_cost_ms"] = cost
            row["norm_share"] = cost["diff"] / row["step_ms"]["diff"] if row["step_ms"]["diff"] else float("nan")
        out[name] = row
    return out


def _scaled(interval: Interval, factor: float) -> dict[str, Any]:
    d = asdict(interval)
    for key in ("diff", "low", "high"):
        d[key] *= factor
    return d


def variant_overrides(args: argparse.Namespace) -> dict[str, list[str]]:
    """name -> the overrides that make the variant: `--variant-overrides` (a sweep's variants, any
    axis), else `norm=<key>` for each of `--variants`."""
    if getattr(args, "variant_overrides", None):
        chosen = json.loads(args.variant_overrides)
        if not isinstance(chosen, dict) or len(chosen) < 2:
            raise ConfigError(f"--variant-overrides: a JSON object of two or more variants -> [overrides], got {chosen!r}")
        return {str(k): [str(o) for o in v] for k, v in chosen.items()}
    return {v: [f"norm={v}"] for v in parse_variants(args.variants or ",".join(preset_norms(STUDY_PRESET)))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    chosen = variant_overrides(args)
    variants = list(chosen)
    total = args.warmup + args.rounds + STEP_ROUNDS
    clock = {"start": time.perf_counter(), "wall_start": time.time()}
    steps, _, cfg = build_variants(args.overrides, chosen, args.batch, total, args.seed)
    device = device_of(cfg)
    batch = int(cfg.optim.micro_batch_size)
    loader = random_batches(steps[variants[0]].model.cfg, int(cfg.seq_len), batch, N_BATCHES, args.seed)
    batches = list(loader)
    clock["kernel"] = time.perf_counter()
    print(f"{len(variants)} variants: their norms' forward+backward at the run's shapes for {args.kernel_seconds:g} s", flush=True)
    threads = args.kernel_threads if device.type == "cpu" else None
    with cpu_threads(threads):
        # The prediction divides the norms' cost by a whole step at the same thread count, timed in
        # the same rounds (one reference step per round), so a round's load is in both.
        reference = REFERENCE_VARIANT if REFERENCE_VARIANT in steps else variants[0]
        kernel, dispatch = kernel_check(
            {v: s.model for v, s in steps.items()}, batches[0][0].to(device), steps[variants[0]].autocast_context,
            bool(cfg.compile), args.kernel_seconds, device, step=reference_step(steps[reference], batches),
        )  # fmt: skip
        kernel["reference"] = reference
        shares = None
        if args.share_sizes and args.share_rounds:  # a trend claim's evidence: each norm's share of a step per model size
            specs = {str(s.model.cfg.norm.norm_type): s.model.cfg.norm for s in steps.values()}
            builders = {name: spec.build for name, spec in specs.items() if name not in SKIPPED}  # the identity has no share
            print(f"then {args.share_rounds} rounds of their norms' share of a step at {args.share_sizes}", flush=True)
            shares = norm_share_rounds(builders, parse_list(args.share_sizes), args.share_rounds, device,
                                       steps[variants[0]].autocast_context)  # fmt: skip
    clock["steps"] = time.perf_counter()
    print(f"then {args.warmup} warm-up steps each and {args.rounds} interleaved rounds of whole steps", flush=True)
    load_before = load()
    samples = time_rounds(steps, batches, args.warmup, args.rounds, device)
    clock["end"] = time.perf_counter()
    return {
        "benchmark": "variants",
        "started_at": clock["wall_start"],  # unix time: the check's run starts here (log_to_mlflow)
        "environment": environment_tags(1, device),
        "git_commit": git_state().commit,
        "settings": {
            "variants": variants,
            "model": str(cfg.model.name),
            # Its shape where overrides changed the named model's: a share is of the model that ran.
            "model_overrides": [o for o in args.overrides if o.lstrip("+~").startswith("model.")],
            "precision": str(cfg.precision.name),
            "compile": bool(cfg.compile),
            "batch": batch,
            "seq_len": int(cfg.seq_len),
            "warmup": args.warmup,
            "rounds": args.rounds,
            "kernel_seconds": args.kernel_seconds,
            "kernel_threads": threads,
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "overrides": list(args.overrides),
        },
        "samples_s": samples,
        "summary": summarize(samples),
        "load": {"before": load_before, "after": load()},
        "kernel": kernel,
        "shares": shares,
        "dispatch": {v: {**d.as_dict(), "warning": d.warning(v)} for v, d in dispatch.items()},
        "time_s": {  # where the check's time went
            "build": clock["kernel"] - clock["start"],
            "kernel": clock["steps"] - clock["kernel"],
            "steps": clock["end"] - clock["steps"],
        },
        "config": cfg,
    }


def verdict_lines(report: dict[str, Any]) -> list[str]:
    """The speed verdicts the sweep report gives (its pairs and margin, from the training config)."""
    cfg: DictConfig = report["config"]
    report_cfg = OmegaConf.to_container(cfg.report, resolve=True) if "report" in cfg else None
    margins, pairs = settings(report_cfg)  # type: ignore[arg-type]
    variants = report["settings"]["variants"]
    chosen = pairs_for(dict.fromkeys(variants, ""), pairs)
    reference = REFERENCE_VARIANT if REFERENCE_VARIANT in variants else variants[0]
    return speed_lines(report, compare_speed(report, chosen, margins.speed), reference)


def _cell(d: dict[str, Any] | None, fmt: str) -> str:
    if d is None:
        return "—"
    return f"{fmt.format(d['diff'])} [{fmt.format(d['low'])}, {fmt.format(d['high'])}]"


SHARE_HEADER = "norm share of step"
BELOW_NOISE = "— (not above the steps' noise)"


def share_cell(share: float | None) -> str:
    """A norm's share of a step, a fraction in [0, 1]; one outside it (a difference of two noisy whole
    steps read -16.6% on a loaded machine) is no share but noise, and is said so."""
    if share is None or not math.isfinite(share):
        return "—"
    return f"{share:.1%}" if 0 <= share <= 1 else BELOW_NOISE


def to_markdown(report: dict[str, Any]) -> str:
    s, env = report["settings"], report["environment"]
    headers = ["variant", "step (ms), median [95% CI]", f"step ÷ {REFERENCE_VARIANT}", f"norm cost (ms) vs {BASELINE}", SHARE_HEADER]
    rows = []
    own = norm_shares(report)  # the norms' own kernels' time per step ÷ a whole step, when they were timed
    for name, r in report["summary"].items():
        share = own.get(name) if own else r.get("norm_share")
        rows.append([name, _cell(r["step_ms"], "{:.1f}"), _cell(r.get("ratio"), "{:.3f}"),
                     _cell(r.get("norm_cost_ms"), "{:+.1f}"), share_cell(share)])  # fmt: skip
    return "\n".join(
        [
            "# Interleaved training-step speed",
            "",
            f"- machine: {env['env.device']}, torch {env['env.torch']}, host {env['env.host']}",
            f"- model {s['model']}, precision {s['precision']}, compile {s['compile']}, batch {s['batch']} × "
            f"{s['seq_len']} tokens; {s['warmup']} warm-up steps each, then {s['rounds']} rounds of one step per variant",
            f"- training config overrides: {' '.join(s['overrides']) or 'none'}",
            "- intervals: 95% bootstrap of the median over rounds; ratios and costs are per round, so drift cancels",
            f"- {SHARE_HEADER}: "
            + (f"each norm's own forward+backward per step (its kernels, timed apart) ÷ the reference's whole step in the "
               f"same round, median over rounds ({share_where(report)})" if own
               else f"the norm cost ÷ the variant's step; {BELOW_NOISE} where the two steps' difference fell outside [0, 100%]"),
            "",
            markdown_table(headers, rows),
        ]
    )


CHECK_SECTION = "speed_check_run"  # the check run's own numbers: a chart section apart from the jobs' estimates (speed_check/)


def check_metrics(report: dict[str, Any]) -> dict[str, float]:
    """The check's metrics on its run. With the norms' kernels timed: per variant its norm's own time
    per step and its median whole step (`speed_check_run/<variant>.norm_ms`, `.step_ms`), never a
    difference of two noisy steps that can read as a negative cost (the pairs' estimates are on the
    sweep run, from the same rounds). Without: each variant's whole-step ratio to the reference and
    its norm cost by step differences, with their intervals, which the report then reads."""
    values: dict[str, float] = {}
    norms = (report.get("kernel") or {}).get("samples_s") or {}
    if norms:
        for name, r in report["summary"].items():
            prefix = f"{CHECK_SECTION}/{metric_key(name)}"
            values[f"{prefix}.step_ms"] = r["step_ms"]["diff"]
            if norms.get(name):
                values[f"{prefix}.norm_ms"] = 1e3 * float(np.median(norms[name]))
        return values
    for name, r in report["summary"].items():
        for key in ("step_ms", "ratio", "norm_cost_ms"):
            if key in r:
                named = metric_key(name)  # the report reads them back by the same key
                values.update({f"{key}/{named}": r[key]["diff"], f"{key}_low/{named}": r[key]["low"],
                               f"{key}_high/{named}": r[key]["high"]})  # fmt: skip
    return values


def log_to_mlflow(report: dict[str, Any], files: list[Path]) -> str | None:
    """The `bench-variants` run in the config's experiment: settings, per-variant metrics, the files."""
    cfg: DictConfig = report["config"]
    if not cfg.logger.enabled:
        return None
    store = Store.connect(str(cfg.logger.tracking_uri))
    experiment_id = store.experiment_id(str(cfg.experiment_name), cfg.logger.artifact_location)
    tags = {BENCH_TAG: BENCH_VARIANTS, GIT_COMMIT_TAG: report["git_commit"], **report["environment"]}
    # A sweep's own check is nested under its sweep run and named for what it is there.
    parent = os.environ.get(PARENT_ENV)
    if parent:
        tags[PARENT_TAG] = parent
    # Started when the check did: the run's duration in the UI is the check's, not its recording's.
    started_ms = int(report["started_at"] * 1000)
    run_id = store.create_run(experiment_id, SPEED_CHECK_RUN_NAME if parent else BENCH_RUN_NAME, tags, started_ms)
    params = {f"bench.{k}": v for k, v in report["settings"].items() if k != "overrides"}
    params.update({k: v for k, v in flatten(cfg).items() if k.split(".")[0] in ("model", "precision", "optim")})
    store.log_params(run_id, params)
    store.log_metrics(run_id, check_metrics(report))
    store.log_files(run_id, files)
    store.terminate(run_id, "FINISHED")
    return run_id


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variants", default=None,
        help=f"comma-separated norm keys (default: the norms experiment={STUDY_PRESET} sweeps, the study's five)",
    )  # fmt: skip
    parser.add_argument(
        "--variant-overrides", default=None, metavar="JSON",
        help='variants built from overrides, as a sweep varies them: {"name": ["norm=a", "model.qk_norm=true"], ...} (replaces --variants)',
    )  # fmt: skip
    parser.add_argument("--rounds", type=cli.int_option(2), default=20, help="timed rounds, one step of every variant each")
    parser.add_argument("--warmup", type=cli.int_option(0), default=3, help="untimed steps of each variant first")
    parser.add_argument(
        "--kernel-seconds", type=cli.number_option(0), default=float(ReportSchema.speed_kernel_s),
        help="seconds of interleaved rounds of the variants' norm forward+backward at the run's shapes (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--kernel-threads", type=cli.int_option(0), default=1,
        help="CPU threads of the norm-kernel rounds (default 1: robust to other processes; 0 = torch's choice)",
    )  # fmt: skip
    parser.add_argument(
        "--share-sizes", default="", metavar="SIZES",
        help="comma-separated model sizes (conf/model) at which each norm's share of a step is timed (a trend claim's evidence)",
    )  # fmt: skip
    parser.add_argument("--share-rounds", type=cli.int_option(0), default=0, help="interleaved rounds of those shares (0: none)")
    parser.add_argument("--batch", type=cli.int_option(1), help="sequences per step (default: the config's optim.micro_batch_size)")
    parser.add_argument("--seed", type=cli.int_option(0), default=0, help="initial weights and batches")
    parser.add_argument("--out", type=Path, help="folder for variants.json / variants.md (default: <paths.reports_dir>/bench)")
    parser.add_argument(
        "overrides", nargs="*", help="training config overrides: model=gpt2_small precision=bf16_mixed cluster=gpu "
        "experiment_name=norm_sweep_seeds (the MLflow experiment of the bench-variants run) logger=none ..."
    )  # fmt: skip


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.rounds < 2 or args.warmup < 0 or not args.kernel_seconds >= 0:
        raise ConfigError("--rounds must be >= 2 (an interval needs two rounds), --warmup >= 0 and --kernel-seconds >= 0")
    report = run(args)
    markdown = to_markdown(report)
    payload = {k: v for k, v in report.items() if k != "config"}
    json_path, md_path = write_report(args.out or default_out_dir(args.overrides), "variants", payload, markdown)
    run_id = log_to_mlflow(report, [json_path, md_path])
    print()
    print(markdown)
    print()
    print("\n".join(verdict_lines(report)))
    print(f"wrote {json_path} and {md_path}" + (f"; MLflow run {run_id} ({BENCH_RUN_NAME})" if run_id else ""))
    return report
