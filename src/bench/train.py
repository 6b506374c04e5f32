"""Training throughput: tokens/s and MFU of one model and norm, by a plain loop and by Lightning.

Both paths train the same model (same seed, same initial weights) built as training builds it
(`src.training.steps`: the composed config, `resolve_budget`, GPTLitModule with its AdamW, schedule and
clipping) on the same random-token batches; the Lightning path runs under the Trainer that
`src.train.build_trainer` makes, so their ratio is the framework's overhead. Random tokens keep
data loading out of the measurement: the benchmark isolates compute.

    MFU = tokens/s × training FLOPs per token (src.model.gpt.model_stats) ÷ peak FLOP/s

The peak must be an upper bound. On a known GPU it is the datasheet's dense peak; on a CPU it is
the best of repeated large matmuls measured before and after the rounds (the machine's speed
drifts, so one timing of one matmul is not a peak). A round whose MFU still exceeds 100% is
reported as a failed measurement, not as a result. The plain ÷ Lightning ratio is the median of
per-round ratios (the paths alternate within each round) with a 95% bootstrap interval.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from src.bench.common import machine_info, resolve_device, synchronize, time_fn
from src.bench.files import default_out_dir, write_report
from src.core import cli
from src.core.devices import DeviceSpec, gpu_peak_tflops, matmul_kind
from src.core.tables import markdown_table
from src.stats.inference import median_interval
from src.training.lit_module import GPTLitModule
from src.training.run_life import build_trainer
from src.training.run_spec import TrainSpec
from src.training.steps import TrainStep, bench_config, build_module, random_batches

PRECISIONS = {"fp32": "fp32", "bf16-mixed": "bf16_mixed"}  # --precision -> conf/precision preset
CPU_MATMUL_N = 4096  # 137 GFLOP per product: long enough that timer and launch costs vanish
PEAK_REPEATS = 5


def measure_matmul_tflops(
    device: torch.device, dtype: torch.dtype, n: int = CPU_MATMUL_N, repeats: int = PEAK_REPEATS
) -> float:
    """Best achieved TFLOP/s of `repeats` n×n @ n×n matmuls (2n³ FLOPs each): the practical peak.

    The best, not the median: a peak must bound every other measurement from above.
    """
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    t = min(time_fn(lambda: torch.matmul(a, b, out=out), device, warmup=1, repeats=repeats))
    return 2 * n**3 / t / 1e12


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation, a fraction; above 1 the peak was not an upper bound."""
    return tokens_per_s * flops_per_token / peak_flops


def bench_overrides(args: argparse.Namespace) -> list[str]:
    """The benchmark's flags as training-config overrides."""
    out = [
        f"model={args.model}",
        f"norm={args.norm}",
        f"precision={PRECISIONS[args.precision]}",
        f"precision.matmul_precision={args.matmul_precision}",
        f"cluster={'gpu' if resolve_device(args.device).type == 'cuda' else 'cpu'}",
        f"seed={args.seed}",
    ]
    if args.context:
        out += [f"model.context_length={args.context}"]
    return out


def plain_loop(step: TrainStep, loader: Any, warmup: int, device: torch.device) -> float:
    """Seconds for the steps after `warmup`, trained by hand with the module's own optimizer."""
    start = 0.0
    for i, (x, y) in enumerate(loader):
        if i == warmup:
            synchronize(device)
            start = time.perf_counter()
        step(x, y)
    synchronize(device)
    return time.perf_counter() - start


class _StepTimer(L.Callback):
    """Wall-clock from the start of optimizer step `warmup` to the end of the last step."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total
        self.start = self.end = 0.0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self.warmup and not self.start:
            synchronize(pl_module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self.total:
            synchronize(pl_module.device)
            self.end = time.perf_counter()


def lightning_loop(module: GPTLitModule, cfg: Any, loader: Any, warmup: int, total: int) -> float:
    """Seconds for the steps after `warmup`, trained by the Trainer that training itself builds."""
    timer = _StepTimer(warmup, total)
    with tempfile.TemporaryDirectory(prefix="normsweep-bench-") as root:  # writes nothing it keeps
        trainer = build_trainer(
            TrainSpec.of(cfg), DeviceSpec.of(cfg), module.budget, callbacks=[timer], root_dir=Path(root),
            checkpointing=bool(cfg.checkpoint.enabled),
        )  # fmt: skip
        trainer.fit(module, train_dataloaders=loader)
    return timer.end - timer.start


@dataclass(frozen=True)
class PathResult:
    round: int
    path: str
    seconds: float
    tokens_per_s: float
    mfu: float

    @property
    def valid(self) -> bool:
        return self.mfu <= 1


def peak(device: torch.device, kind: str) -> tuple[float, str]:
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        tflops = gpu_peak_tflops(gpu, kind)
        if tflops is None:
            raise SystemExit(f"error: no peak for {gpu!r} in src.core.devices.PEAK_TFLOPS; add its dense {kind} TFLOP/s")
        return tflops, f"datasheet dense {kind} peak of {gpu}"
    dtype = torch.bfloat16 if kind == "bf16" else torch.float32
    # The size read here, not frozen in measure_matmul_tflops's default: the tests time a smaller one.
    tflops = measure_matmul_tflops(device, dtype, CPU_MATMUL_N, PEAK_REPEATS)
    return tflops, f"best of {PEAK_REPEATS} {CPU_MATMUL_N}x{CPU_MATMUL_N} {kind} matmuls"


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = resolve_device(args.device)
    total = args.warmup + args.steps
    cfg = bench_config(bench_overrides(args), args.batch, total)
    kind = matmul_kind(args.precision, args.matmul_precision)
    peak_tflops, peak_source = peak(device, kind)

    stats = model_cfg = None
    paths: list[PathResult] = []
    for round_ in range(args.rounds):
        for path in ("plain", "lightning"):
            module, model_cfg = build_module(cfg, args.seed)  # the same initial weights for both paths
            stats = module.stats
            loader = random_batches(model_cfg, int(cfg.seq_len), args.batch, total, args.seed)
            if path == "plain":
                seconds = plain_loop(TrainStep(module, cfg, device), loader, args.warmup, device)
            else:
                seconds = lightning_loop(module, cfg, loader, args.warmup, total)
            tps = args.steps * args.batch * int(cfg.seq_len) / seconds
            paths.append(PathResult(round_, path, seconds, tps, mfu(tps, stats.flops_per_token, peak_tflops * 1e12)))
            print(f"round {round_ + 1} {path}: {tps:,.0f} tokens/s, MFU {paths[-1].mfu:.2%}", flush=True)
    if device.type == "cpu":  # the machine may have sped up since: the peak is the best seen in the run
        later, _ = peak(device, kind)
        peak_tflops = max(peak_tflops, later)
        paths = [PathResult(p.round, p.path, p.seconds, p.tokens_per_s, mfu(p.tokens_per_s, stats.flops_per_token, peak_tflops * 1e12)) for p in paths]  # fmt: skip

    summary = {}
    for path in ("plain", "lightning"):
        tps = median_interval([p.tokens_per_s for p in paths if p.path == path])
        value = mfu(tps.diff, stats.flops_per_token, peak_tflops * 1e12)
        summary[path] = {"tokens_per_s": tps.diff, "tokens_per_s_low": tps.low, "tokens_per_s_high": tps.high,
                         "mfu": value if value <= 1 else None}  # fmt: skip
    failed = [asdict(p) for p in paths if not p.valid]
    seconds = {path: [p.seconds for p in paths if p.path == path] for path in ("plain", "lightning")}
    # Per round: plain tokens/s ÷ Lightning tokens/s = Lightning seconds ÷ plain seconds.
    ratio = median_interval([lit / plain for plain, lit in zip(seconds["plain"], seconds["lightning"], strict=True)])
    return {
        "benchmark": "train",
        "machine": machine_info(device),
        "settings": {
            "model": args.model,
            "norm": args.norm,
            "batch": args.batch,
            "context": int(cfg.seq_len),
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "precision": args.precision,
            "matmul_precision": args.matmul_precision,
            "optimizer": "AdamW (conf/optim/adamw.yaml), warmup-cosine, grad clip",
        },
        "model": {**stats.as_dict(), "config": model_cfg.__dict__},
        "peak_tflops": peak_tflops,
        "peak_source": peak_source,
        "runs": [{**asdict(p), "valid": p.valid} for p in paths],
        "failed_measurements": failed,
        "summary": summary,
        # > 1 means the Lightning path is slower; the target is <= 1.03.
        "plain_over_lightning": ratio.diff,
        "plain_over_lightning_ci": [ratio.low, ratio.high],
    }


def to_markdown(report: dict[str, Any]) -> str:
    s, m = report["settings"], report["machine"]
    headers = ["path", "tokens/s, median [95% CI]", "MFU"]
    rows = []
    for path, r in report["summary"].items():
        cell = f"{r['tokens_per_s']:,.0f} [{r['tokens_per_s_low']:,.0f}, {r['tokens_per_s_high']:,.0f}]"
        rows.append([path, cell, "failed measurement (> 100%)" if r["mfu"] is None else f"{r['mfu']:.1%}"])
    low, high = report["plain_over_lightning_ci"]
    lines = [
        "# Training throughput",
        "",
        f"- machine: {m.get('gpu', m['cpu'])} ({m['cpu_count']} CPUs, {m['torch_threads']} torch threads), "
        f"torch {m['torch']}, device {m['device']}",
        f"- model {s['model']} ({report['model']['n_params']:,} parameters, "
        f"{report['model']['flops_per_token']:,} training FLOPs/token), norm {s['norm']}, "
        f"batch {s['batch']} × context {s['context']}, {s['precision']}",
        f"- {s['steps']} timed steps after {s['warmup']} warm-up steps; {s['rounds']} round(s), plain and Lightning alternating",
        f"- peak {report['peak_tflops']:.3g} TFLOP/s ({report['peak_source']})",
        f"- plain loop ÷ Lightning tokens/s = {report['plain_over_lightning']:.3f} "
        f"(median of per-round ratios, 95% CI [{low:.3f}, {high:.3f}])",
        "",
        markdown_table(headers, rows),
    ]
    if report["failed_measurements"]:
        lines += ["", f"{len(report['failed_measurements'])} round(s) came out above 100% MFU: failed MFU measurements "
                  "(the peak was no upper bound for them); their tokens/s still count."]  # fmt: skip
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--norm", default="torch_layernorm", help="norm registry key")
    parser.add_argument("--model", help="a conf/model preset (default: cpu_small on CPU, gpt2_small on CUDA)")
    parser.add_argument("--steps", type=cli.int_option(1), help="timed optimizer steps (default CPU 10, CUDA 50)")
    parser.add_argument("--warmup", type=cli.int_option(0), default=3, help="untimed steps first")
    parser.add_argument("--batch", type=cli.int_option(1), default=8, help="sequences per step")
    parser.add_argument(
        "--context", type=cli.int_option(1), help="tokens per sequence (default: the preset's context_length)"
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    parser.add_argument(
        "--precision", choices=list(PRECISIONS), help="default: fp32 on CPU, bf16-mixed on CUDA"
    )
    parser.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "medium"])
    parser.add_argument(
        "--rounds", type=cli.int_option(1), default=2, help="alternate plain and Lightning runs this many times (median)"
    )
    parser.add_argument("--seed", type=cli.int_option(0), default=0)
    parser.add_argument("--out", type=Path, help="folder for train.json / train.md (default: <paths.reports_dir>/bench)")


def main(args: argparse.Namespace) -> dict[str, Any]:
    cuda = resolve_device(args.device).type == "cuda"
    args.model = args.model or ("gpt2_small" if cuda else "cpu_small")
    args.steps = args.steps or (50 if cuda else 10)
    args.precision = args.precision or ("bf16-mixed" if cuda else "fp32")
    report = run(args)
    markdown = to_markdown(report)
    json_path, md_path = write_report(args.out or default_out_dir(), "train", report, markdown)
    print()
    print(markdown)
    print(f"wrote {json_path} and {md_path}")
    return report
