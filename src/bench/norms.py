"""Microbenchmark of every norm variant: forward and forward+backward time, GB/s, % of copy.

A norm is memory-bound, so time alone hides how close a kernel is to the machine's limit. Each
time is therefore turned into achieved bandwidth against the bytes a norm must move over its
activations, and that against a plain copy timed in the same run:

    forward:           read x, write y                  2 · rows · width · bytes_per_element
    backward:          read x and dy, write dx           3 · rows · width · bytes_per_element
    forward+backward:  the sum                           5 · rows · width · bytes_per_element

Weights (read; their gradients written) and the per-row statistics (mean/rstd saved by the
forward, read by the backward) are small and reported separately, not counted in GB/s.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from src.bench.common import (
    DTYPES,
    copy_bandwidth,
    copy_reference,
    last_level_cache_bytes,
    machine_info,
    median,
    resolve_device,
    supports_dtype,
    time_interleaved,
)
from src.bench.files import cells, default_out_dir, parse_list, write_report
from src.core import cli
from src.core.norm_yamls import builtin_variants
from src.core.patches import RECOMPILE_INSTEAD, RECOMPILE_PATCH, TORCH_RECOMPILE_WRITTEN_FOR, patchable
from src.core.paths import ConfigError, compose
from src.core.tables import markdown_table
from src.model.norms import DEFAULT_EPS, HandLayerNorm, HandRMSNorm, make_norm

# The identity moves no bytes and normalizes nothing: there is no kernel to measure.
SKIPPED = {"no_norm": "identity: no kernel, no bytes to move"}
COMPILED = {"compiled_hand_layernorm": HandLayerNorm, "compiled_hand_rmsnorm": HandRMSNorm}
HEADLINE_SHAPE = (4096, 768)
COPY = "copy"  # the same-size copy reference, timed with the variants of each shape


def raise_recompile_limit() -> bool:
    """Every shape compiles afresh; the default limit would silently drop later shapes to eager. Set
    only on the torch whose names these are (src/core/patches.py); whether it was set."""
    if not patchable(RECOMPILE_PATCH, TORCH_RECOMPILE_WRITTEN_FOR, RECOMPILE_INSTEAD):
        return False
    torch._dynamo.config.recompile_limit = 1024
    torch._dynamo.config.accumulated_recompile_limit = 4096
    return True


def variants() -> list[str]:
    """Every shipped norm (except the identity) plus the torch.compile'd hand-rolled ones."""
    return [key for key in builtin_variants() if key not in SKIPPED] + list(COMPILED)


def build(variant: str, width: int, eps: float = DEFAULT_EPS) -> nn.Module:
    if variant in COMPILED:
        # One specialised compile per shape: the best case a fixed-shape training run gets.
        return torch.compile(COMPILED[variant](width, eps=eps), dynamic=False)
    return make_norm(variant, width, eps)


# fp32 statistics a norm saves per row for its backward, by family (`family:` in conf/norm/<key>.yaml):
# LayerNorm mean and rstd; RMSNorm and ScaleNorm rstd; DyT none (element-wise).
STATS_PER_ROW = {"layernorm": 2, "rmsnorm": 1, "scalenorm": 1, "dyt": 0, "none": 0}


def stats_per_row(variant: str) -> int:
    key = variant.removeprefix("compiled_")
    return STATS_PER_ROW.get(str(compose([f"norm={key}"]).norm.family), 1)


@dataclass(frozen=True)
class NormBytes:
    forward: int
    backward: int
    params: int  # weights read in forward + read and gradient written in backward
    stats: int  # statistics written by forward and read back by backward

    @property
    def forward_backward(self) -> int:
        return self.forward + self.backward


def norm_bytes(rows: int, width: int, element_size: int, n_params: int, stats_per_row: int) -> NormBytes:
    """The bytes a norm must move over (rows, width) activations, as in the module docstring."""
    activation = rows * width * element_size
    return NormBytes(
        forward=2 * activation,
        backward=3 * activation,
        params=3 * n_params * element_size,
        stats=2 * rows * stats_per_row * 4,
    )


def case_functions(
    module: nn.Module, x: torch.Tensor, dy: torch.Tensor
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The forward and the forward+backward call of one module on shared inputs."""
    x_grad = x.detach().clone().requires_grad_(True)
    params = list(module.parameters())

    def forward() -> None:
        with torch.no_grad():
            module(x)

    def forward_backward() -> None:
        module(x_grad).backward(dy)
        # Dropping the gradients keeps every repeat identical (no accumulation into old buffers).
        x_grad.grad = None
        for p in params:
            p.grad = None

    return forward, forward_backward


def bench_shape(
    names: list[str],
    rows: int,
    width: int,
    dtype: torch.dtype,
    device: torch.device,
    warmup: int,
    repeats: int,
) -> tuple[dict[str, tuple[float, float, int]], dict[str, str]]:
    """Median forward and forward+backward seconds (and parameter count) of each variant at one shape.

    The variants are timed interleaved (see `time_interleaved`). A variant that fails to build or
    to run its first calls (a compile failure) is reported in the second dict instead.
    """
    x = torch.randn(rows, width, device=device, dtype=dtype)
    dy = torch.randn_like(x)
    fwd: dict[str, Callable[[], None]] = {}
    fwd_bwd: dict[str, Callable[[], None]] = {}
    n_params: dict[str, int] = {}
    errors: dict[str, str] = {}
    for name in names:
        try:
            module = build(name, width).to(device=device, dtype=dtype)
            f, fb = case_functions(module, x, dy)
            f()
            fb()  # compiles happen here, outside any timing
        except Exception as exc:  # a compile failure is a finding, not a crash
            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        fwd[name], fwd_bwd[name] = f, fb
        n_params[name] = sum(p.numel() for p in module.parameters())
    # Same-size copies, timed among the variants: the reference for "% of copy" at this shape.
    activation = rows * width * dtype.itemsize
    fwd[COPY] = copy_reference(2 * activation, device, dtype)
    fwd_bwd[COPY] = copy_reference(5 * activation, device, dtype)
    t_fwd = time_interleaved(fwd, device, warmup, repeats)
    t_fwd_bwd = time_interleaved(fwd_bwd, device, warmup, repeats)
    n_params[COPY] = 0
    return {n: (median(t_fwd[n]), median(t_fwd_bwd[n]), n_params[n]) for n in fwd}, errors


def run(
    widths: list[int],
    rows_list: list[int],
    dtype_names: list[str],
    device: torch.device,
    warmup: int,
    repeats: int,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Benchmark every variant over the grid; returns the JSON-ready report."""
    raise_recompile_limit()
    copy = copy_bandwidth(device)
    llc = last_level_cache_bytes(device)
    failed_pct: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    skipped_dtypes = [d for d in dtype_names if not supports_dtype(device, DTYPES[d])]
    for dtype_name in (d for d in dtype_names if d not in skipped_dtypes):
        dtype = DTYPES[dtype_name]
        for width in widths:
            for rows in rows_list:
                shape = {"dtype": dtype_name, "rows": rows, "width": width}
                timings, failed = bench_shape(only or variants(), rows, width, dtype, device, warmup, repeats)
                errors += [{"variant": name, **shape, "error": err} for name, err in failed.items()]
                t_copy_fwd, t_copy_fwd_bwd, _ = timings.pop(COPY)
                act = rows * width * dtype.itemsize
                copy_fwd_gbps, copy_fwd_bwd_gbps = 2 * act / t_copy_fwd / 1e9, 5 * act / t_copy_fwd_bwd / 1e9
                # Above the last-level cache both stream from DRAM: a roofline; below, a cache figure.
                level = "dram" if llc is not None and 2 * act > llc else "cache"
                for name, (t_fwd, t_fwd_bwd, n_params) in timings.items():
                    nb = norm_bytes(rows, width, dtype.itemsize, n_params, stats_per_row(name))
                    fwd_gbps = nb.forward / t_fwd / 1e9
                    fwd_bwd_gbps = nb.forward_backward / t_fwd_bwd / 1e9
                    fwd_pct, fwd_bwd_pct = 100 * fwd_gbps / copy_fwd_gbps, 100 * fwd_bwd_gbps / copy_fwd_bwd_gbps
                    for pass_name, pct in (("fwd", fwd_pct), ("fwd_bwd", fwd_bwd_pct)):
                        if pct > 100:  # faster than a copy of the same bytes: the measurement failed
                            failed_pct.append({"variant": name, **shape, "pass": pass_name, "pct_copy": pct})
                    results.append(
                        {
                            "variant": name,
                            **shape,
                            "level": level,
                            "fwd_ms": t_fwd * 1e3,
                            "fwd_bwd_ms": t_fwd_bwd * 1e3,
                            "fwd_gbps": fwd_gbps,
                            "fwd_bwd_gbps": fwd_bwd_gbps,
                            "copy_fwd_gbps": copy_fwd_gbps,
                            "copy_fwd_bwd_gbps": copy_fwd_bwd_gbps,
                            "fwd_pct_copy": fwd_pct if fwd_pct <= 100 else None,
                            "fwd_bwd_pct_copy": fwd_bwd_pct if fwd_bwd_pct <= 100 else None,
                            "fwd_bytes": nb.forward,
                            "fwd_bwd_bytes": nb.forward_backward,
                            "param_bytes": nb.params,
                            "stats_bytes": nb.stats,
                        }
                    )
                    print(
                        f"{name:>24} {dtype_name} {rows}x{width}: fwd {t_fwd * 1e3:.3f} ms, "
                        f"fwd+bwd {t_fwd_bwd * 1e3:.3f} ms ({fwd_bwd_gbps:.1f} GB/s)",
                        flush=True,
                    )
    return {
        "benchmark": "norms",
        "machine": machine_info(device),
        "settings": {
            "widths": widths,
            "rows": rows_list,
            "dtypes": dtype_names,
            "warmup": warmup,
            "repeats": repeats,
            "eps": DEFAULT_EPS,
        },
        "copy_bandwidth": copy,  # a 256 MiB copy: the DRAM bandwidth, for reference
        "last_level_cache_bytes": llc,
        "results": results,
        "failed_measurements": failed_pct,
        "errors": errors,
        "skipped": {"variants": SKIPPED, "dtypes": skipped_dtypes},
        "headline": headline(results),
    }


def headline(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Fastest RMSNorm forward+backward ÷ nn.LayerNorm's at 4096×768 fp32 (None if not measured)."""
    rows, width = HEADLINE_SHAPE
    case = {
        r["variant"]: r["fwd_bwd_ms"]
        for r in results
        if r["dtype"] == "fp32" and r["rows"] == rows and r["width"] == width
    }
    rms = {k: v for k, v in case.items() if "rmsnorm" in k}
    if "torch_layernorm" not in case or not rms:
        return None
    fastest = min(rms, key=rms.__getitem__)
    return {
        "shape": f"{rows}x{width}",
        "fastest_rmsnorm": fastest,
        "fastest_rmsnorm_ms": rms[fastest],
        "torch_layernorm_ms": case["torch_layernorm"],
        "torch_rmsnorm_ms": case.get("torch_rmsnorm"),
        "ratio": rms[fastest] / case["torch_layernorm"],
    }


TABLE_COLUMNS = [
    "variant", "dtype", "rows", "width", "level", "fwd_ms", "fwd_bwd_ms",
    "fwd_gbps", "fwd_bwd_gbps", "fwd_pct_copy", "fwd_bwd_pct_copy",
]  # fmt: skip


def headline_text(h: dict[str, Any] | None) -> str:
    if h is None:
        return "headline: 4096x768 fp32 with torch_layernorm and an RMSNorm was not in the grid"
    return (
        f"headline: fastest RMSNorm ({h['fastest_rmsnorm']}) fwd+bwd {h['fastest_rmsnorm_ms']:.3f} ms "
        f"÷ nn.LayerNorm {h['torch_layernorm_ms']:.3f} ms = {h['ratio']:.2f} at {h['shape']} fp32"
    )


def to_markdown(report: dict[str, Any]) -> str:
    m, c = report["machine"], report["copy_bandwidth"]
    lines = [
        "# Norm microbenchmark",
        "",
        f"- machine: {m.get('gpu', m['cpu'])} ({m['cpu_count']} CPUs, {m['torch_threads']} torch threads), "
        f"torch {m['torch']}, device {m['device']}",
        f"- DRAM copy bandwidth: {c['gbps']:.1f} GB/s (copy_ of {c['bytes_per_copy'] // 2 // 2**20} MiB, read + write); "
        f"last-level cache {(report['last_level_cache_bytes'] or 0) / 2**20:.0f} MiB",
        "- % of copy: against a copy of the same bytes timed among the variants (the same memory level); "
        "`level` is dram where the tensors exceed the last-level cache (a DRAM roofline), else cache",
        f"- median of {report['settings']['repeats']} repeats after {report['settings']['warmup']} warm-up calls",
        f"- {headline_text(report['headline'])}",
        "",
        markdown_table(TABLE_COLUMNS, cells(report["results"], TABLE_COLUMNS)),
    ]
    if report["failed_measurements"]:
        lines += ["", "## Failed measurements (faster than a copy of the same bytes)", ""] + [
            f"- {f['variant']} {f['dtype']} {f['rows']}x{f['width']} {f['pass']}: {f['pct_copy']:.0f}% of copy"
            for f in report["failed_measurements"]
        ]
    if report["errors"]:
        lines += ["", "## Errors", ""] + [
            f"- {e['variant']} {e['dtype']} {e['rows']}x{e['width']}: {e['error']}" for e in report["errors"]
        ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--widths", type=cli.int_list_option(1), help="comma-separated (default CPU 768,1600; CUDA 768,1024,1280,1600)")
    parser.add_argument("--rows", type=cli.int_list_option(1), help="comma-separated (default CPU 4096,8192; CUDA 4096,8192,16384,32768)")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated subset of fp32,bf16")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    parser.add_argument("--repeats", type=cli.int_option(1), help="timed calls per case (default CPU 10, CUDA 50)")
    parser.add_argument("--warmup", type=cli.int_option(0), default=3, help="untimed calls per case (compiles happen here)")
    parser.add_argument("--variants", help="comma-separated subset of the variants (default: all)")
    parser.add_argument("--quick", action="store_true", help="one shape (4096x768), fp32, 5 repeats")
    parser.add_argument("--out", type=Path, help="folder for norms.json / norms.md (default: <paths.reports_dir>/bench)")


def main(args: argparse.Namespace) -> dict[str, Any]:
    device = resolve_device(args.device)
    cpu = device.type == "cpu"
    if args.quick:
        widths, rows, dtypes, repeats = [768], [4096], ["fp32"], args.repeats or 5
    else:
        # 2 CPU cores: a 2×2 grid per dtype finishes in a few minutes; a GPU takes the full grid.
        widths = args.widths or ([768, 1600] if cpu else [768, 1024, 1280, 1600])
        rows = args.rows or ([4096, 8192] if cpu else [4096, 8192, 16384, 32768])
        dtypes = parse_list(args.dtypes)
        repeats = args.repeats or (10 if cpu else 50)
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise ConfigError(f"--dtypes: unknown dtype(s) {', '.join(unknown)}; valid choices: {', '.join(DTYPES)}")
    only = parse_list(args.variants) if args.variants else None
    if only and (bad := [v for v in only if v not in variants()]):
        raise ConfigError(f"--variants: unknown variant(s) {', '.join(bad)}; valid choices: {', '.join(variants())}")
    report = run(widths, rows, dtypes, device, args.warmup, repeats, only)
    markdown = to_markdown(report)
    json_path, md_path = write_report(args.out or default_out_dir(), "norms", report, markdown)
    print()
    print(markdown_table(TABLE_COLUMNS, cells(report["results"], TABLE_COLUMNS)))
    for e in report["errors"]:
        print(f"error: {e['variant']} {e['dtype']} {e['rows']}x{e['width']}: {e['error']}")
    print(f"copy bandwidth: {report['copy_bandwidth']['gbps']:.1f} GB/s")
    print(headline_text(report["headline"]))
    print(f"wrote {json_path} and {md_path}")
    return report
