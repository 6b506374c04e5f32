"""Training throughput: tokens/s and MFU of one model and norm, by a plain loop and by Lightning.

Both paths train the same model (same seed, same initial weights) on the same random-token
batches with the project's optimizer (AdamW with the `conf/optim/adamw.yaml` settings, its
warmup-cosine schedule, gradient clipping), so their ratio is the framework's overhead. Random
tokens keep data loading out of the measurement: the benchmark isolates compute.

    MFU = tokens/s × training FLOPs per token (src.model.model_stats) ÷ peak FLOP/s

The peak comes from `PEAK_TFLOPS` (dense, no sparsity) on a known GPU, and on a CPU from a
large matmul measured in the same run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from src.bench.common import (
    DEFAULT_OUT,
    machine_info,
    markdown_table,
    median,
    resolve_device,
    synchronize,
    time_fn,
    write_report,
)
from src.budget import Budget
from src.lit_module import GPTLitModule
from src.model import GPTConfig, GPTModel
from src.norms import check_norm_type
from src.paths import CONF_DIR

# Dense peak TFLOP/s per matmul precision, from NVIDIA's datasheets (their "with sparsity"
# figures are twice these). Keys are matched against torch.cuda.get_device_name(), most specific first.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "h200 nvl": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "h200": {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9},  # SXM; same tensor cores as H100 SXM
    "h100 pcie": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.2},
    "h100 nvl": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "h100": {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9},  # SXM (device name "H100 80GB HBM3")
    "a100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},  # SXM and PCIe
    "l40s": {"bf16": 362.05, "tf32": 183.0, "fp32": 91.6},
    "l4": {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "a10g": {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2},  # A10 datasheet; AWS's A10G is the same chip
    "rtx 4090": {"bf16": 165.2, "tf32": 82.6, "fp32": 82.6},  # bf16 with fp32 accumulate
}
PRECISIONS = {"fp32": "32-true", "bf16-mixed": "bf16-mixed"}
CPU_MATMUL_N = 2048


def gpu_peak_tflops(device_name: str, matmul: str) -> float | None:
    """Datasheet dense peak for a GPU name and matmul precision ("bf16", "tf32", "fp32"); None if unknown."""
    name = device_name.lower()
    for key, peaks in PEAK_TFLOPS.items():
        if key in name:
            return peaks[matmul]
    return None


def measure_matmul_tflops(
    device: torch.device, dtype: torch.dtype, n: int = CPU_MATMUL_N, repeats: int = 5
) -> float:
    """Achieved TFLOP/s of an n×n @ n×n matmul (2n³ FLOPs): the CPU's practical peak."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t = median(time_fn(lambda: a @ b, device, warmup=2, repeats=repeats))
    return 2 * n**3 / t / 1e12


def matmul_kind(precision: str, matmul_precision: str) -> str:
    """Which peak applies: bf16 autocast -> bf16; fp32 with TF32 allowed -> tf32; else fp32."""
    if precision == "bf16-mixed":
        return "bf16"
    return "fp32" if matmul_precision == "highest" else "tf32"


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation, a fraction in [0, 1]."""
    return tokens_per_s * flops_per_token / peak_flops


def model_config(name: str, norm: str, context: int | None) -> GPTConfig:
    """A `conf/model/<name>.yaml` preset with the norm under test; `context` overrides its length."""
    path = CONF_DIR / "model" / f"{name}.yaml"
    if not path.exists():
        presets = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
        raise SystemExit(f"unknown model {name!r}; presets: {', '.join(presets)}")
    fields = OmegaConf.to_container(OmegaConf.load(path))
    fields.pop("name", None)
    if context:
        fields["context_length"] = context
    return GPTConfig(**fields, norm_type=norm)


def random_batches(cfg: GPTConfig, batch: int, n_batches: int, seed: int) -> DataLoader:
    """`n_batches` batches of uniformly random tokens, inputs and next-token targets."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (n_batches * batch, cfg.context_length + 1), generator=gen)
    return DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=batch, shuffle=False)


def build_module(
    cfg: GPTConfig, optim: dict[str, Any], batch: int, total_steps: int, seed: int
) -> GPTLitModule:
    torch.manual_seed(seed)  # the same initial weights for both paths
    tokens_per_step = batch * cfg.context_length
    budget = Budget(total_steps, 1, batch, tokens_per_step, total_steps * tokens_per_step)
    return GPTLitModule(GPTModel(cfg), optim, budget)


def plain_loop(
    module: GPTLitModule, loader: DataLoader, warmup: int, device: torch.device, precision: str
) -> float:
    """Seconds for the steps after `warmup`, trained by hand with the module's own optimizer."""
    model = module.model.to(device)
    module.to(device)
    optimizers = module.configure_optimizers()
    optimizer, scheduler = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    clip = module.optim.get("grad_clip")
    model.train()
    start = 0.0
    for step, (x, y) in enumerate(loader):
        if step == warmup:
            synchronize(device)
            start = time.perf_counter()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            # As in GPTLitModule.training_step, the loss is computed inside autocast.
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), float(clip))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
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


def lightning_loop(
    module: GPTLitModule, loader: DataLoader, warmup: int, total: int, device: torch.device, precision: str
) -> float:
    """Seconds for the steps after `warmup`, trained by the project's GPTLitModule under a Trainer."""
    timer = _StepTimer(warmup, total)
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=PRECISIONS[precision],
        max_steps=total,
        max_epochs=-1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        callbacks=[timer],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, train_dataloaders=loader)
    return timer.end - timer.start


@dataclass(frozen=True)
class PathResult:
    path: str
    seconds: float
    tokens_per_s: float
    mfu: float


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = resolve_device(args.device)
    check_norm_type(args.norm)
    cfg = model_config(args.model, args.norm, args.context)
    torch.set_float32_matmul_precision(args.matmul_precision)
    optim = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "optim" / "adamw.yaml"))
    total = args.warmup + args.steps
    kind = matmul_kind(args.precision, args.matmul_precision)
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        peak_tflops = gpu_peak_tflops(gpu, kind)
        peak_source = f"datasheet dense {kind} peak of {gpu}"
        if peak_tflops is None:
            raise SystemExit(f"no peak for {gpu!r} in PEAK_TFLOPS; add its dense {kind} TFLOP/s")
    else:
        dtype = torch.bfloat16 if kind == "bf16" else torch.float32
        peak_tflops = measure_matmul_tflops(device, dtype)
        peak_source = f"measured {CPU_MATMUL_N}x{CPU_MATMUL_N} {kind} matmul"

    stats = None
    paths: list[PathResult] = []
    for round_ in range(args.rounds):
        for path in ("plain", "lightning"):
            module = build_module(cfg, optim, args.batch, total, args.seed)
            stats = module.stats
            loader = random_batches(cfg, args.batch, total, args.seed)
            if path == "plain":
                seconds = plain_loop(module, loader, args.warmup, device, args.precision)
            else:
                seconds = lightning_loop(module, loader, args.warmup, total, device, args.precision)
            tps = args.steps * args.batch * cfg.context_length / seconds
            paths.append(PathResult(path, seconds, tps, mfu(tps, stats.flops_per_token, peak_tflops * 1e12)))
            print(f"round {round_ + 1} {path}: {tps:,.0f} tokens/s, MFU {paths[-1].mfu:.2%}", flush=True)

    summary = {}
    for path in ("plain", "lightning"):
        tps = median([p.tokens_per_s for p in paths if p.path == path])
        summary[path] = {"tokens_per_s": tps, "mfu": mfu(tps, stats.flops_per_token, peak_tflops * 1e12)}
    ratio = summary["plain"]["tokens_per_s"] / summary["lightning"]["tokens_per_s"]
    return {
        "benchmark": "train",
        "machine": machine_info(device),
        "settings": {
            "model": args.model,
            "norm": args.norm,
            "batch": args.batch,
            "context": cfg.context_length,
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "precision": args.precision,
            "matmul_precision": args.matmul_precision,
            "optimizer": "AdamW (conf/optim/adamw.yaml), warmup-cosine, grad clip",
        },
        "model": {**stats.as_dict(), "config": cfg.__dict__},
        "peak_tflops": peak_tflops,
        "peak_source": peak_source,
        "runs": [p.__dict__ for p in paths],
        "summary": summary,
        # > 1 means the Lightning path is slower; the target is <= 1.03.
        "plain_over_lightning": ratio,
    }


def to_markdown(report: dict[str, Any]) -> str:
    s, m = report["settings"], report["machine"]
    rows = [{"path": k, **v} for k, v in report["summary"].items()]
    for row in rows:
        row["mfu_pct"] = 100 * row.pop("mfu")
    return "\n".join(
        [
            "# Training throughput",
            "",
            f"- machine: {m.get('gpu', m['cpu'])} ({m['cpu_count']} CPUs, {m['torch_threads']} torch threads), "
            f"torch {m['torch']}, device {m['device']}",
            f"- model {s['model']} ({report['model']['n_params']:,} parameters, "
            f"{report['model']['flops_per_token']:,} training FLOPs/token), norm {s['norm']}, "
            f"batch {s['batch']} × context {s['context']}, {s['precision']}",
            f"- {s['steps']} timed steps after {s['warmup']} warm-up steps, median of {s['rounds']} round(s)",
            f"- peak {report['peak_tflops']:.3g} TFLOP/s ({report['peak_source']})",
            f"- plain loop ÷ Lightning tokens/s = {report['plain_over_lightning']:.3f}",
            "",
            markdown_table(rows, ["path", "tokens_per_s", "mfu_pct"]),
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--norm", default="torch_layernorm", help="norm registry key")
    parser.add_argument("--model", help="a conf/model preset (default: cpu_small on CPU, gpt2_small on CUDA)")
    parser.add_argument("--steps", type=int, help="timed optimizer steps (default CPU 10, CUDA 50)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument(
        "--context", type=int, help="tokens per sequence (default: the preset's context_length)"
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    parser.add_argument(
        "--precision", choices=list(PRECISIONS), help="default: fp32 on CPU, bf16-mixed on CUDA"
    )
    parser.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "medium"])
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternate plain and Lightning runs this many times (median)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for train.json / train.md")


def main(args: argparse.Namespace) -> dict[str, Any]:
    cuda = resolve_device(args.device).type == "cuda"
    args.model = args.model or ("gpt2_small" if cuda else "cpu_small")
    args.steps = args.steps or (50 if cuda else 10)
    args.precision = args.precision or ("bf16-mixed" if cuda else "fp32")
    report = run(args)
    markdown = to_markdown(report)
    json_path, md_path = write_report(args.out, "train", report, markdown)
    print()
    print(markdown)
    print(f"wrote {json_path} and {md_path}")
    return report
