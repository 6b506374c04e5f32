"""The benchmarks run on tiny sizes and write well-formed reports; their formulas are checked by hand."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from src.bench import norms as norm_bench
from src.bench import train as train_bench
from src.bench import variants as variant_bench
from src.bench.files import parse_list
from src.core.paths import PROJECT_ROOT, ConfigError
from src.core.tables import markdown_table
from src.model.gpt import GPTConfig, GPTModel, model_stats
from src.report.read.runs import load_speed_check, open_store
from src.training.steps import bench_config


def test_norm_bytes_by_hand() -> None:
    # 128 rows × 64 wide fp32 = 32 KiB of activations; LayerNorm has 128 parameters, 2 stats/row.
    nb = norm_bench.norm_bytes(rows=128, width=64, element_size=4, n_params=128, stats_per_row=2)
    assert nb.forward == 2 * 32768  # read x, write y
    assert nb.backward == 3 * 32768  # read x and dy, write dx
    assert nb.forward_backward == 163840
    assert nb.params == 1536  # 128 weights × 4 B × (read fwd, read bwd, write grad)
    assert nb.stats == 2048  # 128 rows × 2 stats × 4 B × (write, read)
    bf16 = norm_bench.norm_bytes(128, 64, 2, 64, norm_bench.stats_per_row("fast_rmsnorm"))
    assert (bf16.forward, bf16.stats) == (32768, 1024)


def test_mfu_and_peaks_by_hand() -> None:
    assert train_bench.mfu(tokens_per_s=1000, flops_per_token=6e6, peak_flops=1e10) == pytest.approx(0.6)
    assert train_bench.gpu_peak_tflops("NVIDIA H200", "bf16") == 989.4
    assert train_bench.gpu_peak_tflops("NVIDIA H200 NVL", "bf16") == 835.5
    assert train_bench.gpu_peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert train_bench.gpu_peak_tflops("NVIDIA H100 PCIe", "tf32") == 378.0
    assert train_bench.gpu_peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert train_bench.gpu_peak_tflops("NVIDIA L4", "bf16") == 121.0
    assert train_bench.gpu_peak_tflops("Some Future GPU", "bf16") is None
    assert train_bench.matmul_kind("bf16-mixed", "highest") == "bf16"
    assert train_bench.matmul_kind("fp32", "high") == "tf32"
    assert train_bench.matmul_kind("fp32", "highest") == "fp32"


def test_training_flops_per_token_by_hand() -> None:
    # vocab 100, context 8, width 16, 1 layer, LayerNorm, untied: the MFU numerator, counted by hand.
    cfg = GPTConfig(vocab_size=100, context_length=8, emb_dim=16, n_heads=2, n_layers=1)
    block = 2 * 32 + (4 * 16 * 16 + 16) + (16 * 64 + 64 + 64 * 16 + 16)  # norms, attention, MLP
    n = 100 * 16 + block + 32 + 16 * 100  # embeddings (positions excluded), final norm, head
    assert model_stats(GPTModel(cfg)).flops_per_token == 6 * n + 12 * 1 * 16 * 8


def test_bench_config_is_the_training_config() -> None:
    args = argparse.Namespace(model="cpu_small", norm="fast_rmsnorm", precision="fp32", matmul_precision="highest",
                              device="cpu", seed=0, context=32)  # fmt: skip
    cfg = bench_config(train_bench.bench_overrides(args), batch=4, steps=7)
    assert (cfg.norm.norm_type, cfg.model.context_length, cfg.seq_len) == ("fast_rmsnorm", 32, 32)
    assert (cfg.optim.micro_batch_size, cfg.optim.max_steps, cfg.optim.grad_accum) == (4, 7, 1)
    with pytest.raises(ConfigError, match="no_such_model"):
        bench_config(["model=no_such_model"], batch=None, steps=2)


def test_table_and_list_helpers() -> None:
    assert parse_list("768, 1024,", int) == [768, 1024]
    table = markdown_table(["a", "b"], [["1", "0.5"]])  # the report's one table writer
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.5 |"]


def check_norm_row(r: dict, report: dict) -> None:
    """One measured case of the norm bench, 128 rows x 64 wide: every figure there and plausible."""
    for key in ("fwd_ms", "fwd_bwd_ms", "fwd_gbps", "fwd_bwd_gbps", "copy_fwd_gbps", "param_bytes", "stats_bytes"):
        # A norm without learnable parameters, or DyT (no per-row statistics), moves none of those.
        zero = (key == "param_bytes" and r["variant"] == "layernorm_noaffine") or (
            key == "stats_bytes" and r["variant"] in ("dyt", "fast_dyt")
        )
        assert r[key] == 0 if zero else r[key] > 0, (r["variant"], key)
    assert r["level"] == "cache"  # 32 KiB fits any last-level cache
    for pass_name in ("fwd", "fwd_bwd"):
        # Never above 100%: such a figure is listed as a failed measurement instead.
        pct = r[f"{pass_name}_pct_copy"]
        failed = {(f["variant"], f["dtype"], f["pass"]) for f in report["failed_measurements"]}
        assert (0 < pct <= 100) if pct is not None else (r["variant"], r["dtype"], pass_name) in failed
    assert r["fwd_bytes"] == 2 * 128 * 64 * (4 if r["dtype"] == "fp32" else 2)


@pytest.mark.slow
def test_norms_cli_writes_reports(tmp_path: Path) -> None:
    """Every variant through the command line in fp32 (bf16 compiles each compiled variant again,
    ~20 s here: two variants take it below; the kernels' bf16 results are test_fast_norms' and test_norms')."""
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "src.bench", "norms", "--widths", "64", "--rows", "128",
           "--repeats", "2", "--warmup", "1", "--dtypes", "fp32", "--device", "cpu", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "headline:" in proc.stdout and "copy bandwidth" in proc.stdout

    report = json.loads((out / "norms.json").read_text())
    assert report["errors"] == []
    assert report["copy_bandwidth"]["gbps"] > 0
    assert "no_norm" in report["skipped"]["variants"]
    seen = {(r["variant"], r["dtype"]) for r in report["results"]}
    expected = set(norm_bench.variants())
    assert {"fast_rmsnorm", "compiled_hand_layernorm", "compiled_hand_rmsnorm", "torch_layernorm"} <= expected
    assert {"dyt", "fast_dyt", "scalenorm", "torch_layernorm_nobias", "layernorm_noaffine"} <= expected
    assert seen == {(v, "fp32") for v in expected}
    for r in report["results"]:
        check_norm_row(r, report)
    assert report["headline"] is None  # 4096x768 was not in this grid

    markdown = (out / "norms.md").read_text()
    assert markdown.startswith("# Norm microbenchmark")
    assert all(f"| {v} | fp32 | 128 | 64 |" in markdown for v in expected)


def test_norms_bench_in_bf16() -> None:
    report = norm_bench.run([64], [128], ["bf16"], torch.device("cpu"), 1, 2, ["torch_layernorm", "hand_rmsnorm"])
    assert report["errors"] == []
    assert {(r["variant"], r["dtype"]) for r in report["results"]} == {("torch_layernorm", "bf16"), ("hand_rmsnorm", "bf16")}
    for r in report["results"]:
        check_norm_row(r, report)


def test_norms_headline_picks_fastest_rmsnorm() -> None:
    rows = [
        {"variant": v, "dtype": "fp32", "rows": 4096, "width": 768, "fwd_bwd_ms": ms}
        for v, ms in [("torch_layernorm", 4.0), ("torch_rmsnorm", 20.0), ("fast_rmsnorm", 3.0)]
    ]
    h = norm_bench.headline(rows)
    assert (h["fastest_rmsnorm"], h["ratio"], h["torch_rmsnorm_ms"]) == ("fast_rmsnorm", 0.75, 20.0)


@pytest.mark.slow
def test_train_bench_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CPU peak from 1024x1024 matmuls (2 GFLOP, ~50 ms here), not 4096x4096 (137 GFLOP, ~2.3 s each,
    # twelve of them: nearly all of this test's time): the same measurement and bookkeeping, smaller.
    # A peak that bounds nothing is still handled: such rounds are flagged, as checked below.
    monkeypatch.setattr(train_bench, "CPU_MATMUL_N", 1024)
    args = argparse.Namespace(
        norm="fast_rmsnorm", model="cpu_small", steps=2, warmup=1, batch=2, context=16, device="cpu",
        precision="fp32", matmul_precision="highest", rounds=2, seed=0, out=tmp_path,
    )  # fmt: skip
    report = train_bench.main(args)
    saved = json.loads((tmp_path / "train.json").read_text())
    assert saved["summary"].keys() == {"plain", "lightning"}
    assert saved["peak_tflops"] > 0 and saved["peak_source"] == f"best of {train_bench.PEAK_REPEATS} 1024x1024 fp32 matmuls"
    for run in saved["runs"]:
        # Each round's MFU is the formula on its own numbers; above 100% it is flagged, never hidden.
        assert run["mfu"] == pytest.approx(run["tokens_per_s"] * saved["model"]["flops_per_token"] / (saved["peak_tflops"] * 1e12))
        assert run["valid"] == (run["mfu"] <= 1)
    assert len(saved["failed_measurements"]) == sum(not r["valid"] for r in saved["runs"])
    for path in saved["summary"].values():
        assert path["tokens_per_s_low"] <= path["tokens_per_s"] <= path["tokens_per_s_high"]
    low, high = saved["plain_over_lightning_ci"]
    assert low <= report["plain_over_lightning"] <= high
    assert (tmp_path / "train.md").read_text().startswith("# Training throughput")


# --- bench variants: interleaved training steps ------------------------------------------------

TINY_BENCH = ["model.n_layers=1", "model.emb_dim=32", "model.n_heads=2", "model.context_length=16", "optim.micro_batch_size=2"]


def test_variants_start_from_identical_weights() -> None:
    variants = ["hand_layernorm", "torch_layernorm", "torch_rmsnorm", "no_norm"]
    _, models, _ = variant_bench.build_variants(TINY_BENCH, variants, None, steps=2, seed=3)
    states = {v: m.state_dict() for v, m in models.items()}
    shared = set.intersection(*(set(s) for s in states.values()))
    assert "tok_emb.weight" in shared and "out_head.weight" in shared
    for v in variants[1:]:
        for key in shared:
            assert torch.equal(states[v][key], states[variants[0]][key]), (v, key)
        # Only norm tensors are not shared (no_norm has none; RMSNorm has no bias).
        assert all("norm" in k for k in set(states[v]) ^ shared)


@pytest.mark.slow  # the variants benchmark: real interleaved training steps
def test_variants_bench_writes_reports_and_an_mlflow_run(tmp_path: Path, store: dict[str, str]) -> None:
    # No --out: the reports go under paths.root_dir like every other output, not into the working directory.
    in_cwd = Path("reports/bench/variants.json")
    before = in_cwd.stat().st_mtime_ns if in_cwd.exists() else None
    args = argparse.Namespace(
        variants="hand_layernorm,torch_layernorm,no_norm", rounds=2, warmup=1, batch=None, seed=0, out=None,
        kernel_seconds=0.1, kernel_threads=1, share_sizes="", share_rounds=0,
        overrides=[*TINY_BENCH, f"paths.mlflow_db={store['db']}", f"paths.mlflow_artifacts={store['artifacts']}",
                   "experiment_name=bench", f"paths.root_dir={tmp_path / 'elsewhere'}"],
    )  # fmt: skip
    report = variant_bench.main(args)
    assert (in_cwd.stat().st_mtime_ns if in_cwd.exists() else None) == before
    out = tmp_path / "elsewhere" / "reports" / "bench"
    saved = json.loads((out / "variants.json").read_text())
    assert saved["settings"]["rounds"] == 2 and set(saved["samples_s"]) == {"hand_layernorm", "torch_layernorm", "no_norm"}
    assert all(len(v) == 2 and min(v) > 0 for v in saved["samples_s"].values())
    ref = saved["summary"]["torch_layernorm"]["ratio"]
    assert (ref["diff"], ref["low"], ref["high"]) == (1.0, 1.0, 1.0)
    hand = report["samples_s"]["hand_layernorm"]
    ratios = [h / t for h, t in zip(hand, report["samples_s"]["torch_layernorm"], strict=True)]
    assert saved["summary"]["hand_layernorm"]["ratio"]["diff"] == pytest.approx(sum(ratios) / 2)  # median of two
    assert saved["summary"]["no_norm"]["norm_cost_ms"]["diff"] == 0.0
    assert (out / "variants.md").read_text().startswith("# Interleaved training-step speed")
    # First the norms' own forward+backward at the run's shape (1 block: 3 norm calls of 2 x 16 rows, 32 wide).
    kernel = saved["kernel"]
    assert kernel["rounds"] >= 10 and kernel["threads"] == 1 and kernel["reference"] == "torch_layernorm"
    assert kernel["calls"]["hand_layernorm"] == [{"module": "HandLayerNorm", "shape": [2, 16, 32], "dtype": "float32", "calls": 3}]
    assert all(len(v) == kernel["rounds"] and min(v) > 0 for v in kernel["samples_s"].values())
    assert saved["dispatch"]["torch_layernorm"]["summary"] == "fwd=fused bwd=fused"
    assert set(saved["time_s"]) == {"build", "kernel", "steps"}

    client = MlflowClient(store["uri"])
    exp = client.get_experiment_by_name("bench")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == "bench-variants" and run.data.tags["normsweep.bench"] == "variants"
    assert "env.torch" in run.data.tags
    # Its metrics: each norm's own time per step (never a difference of noisy steps, which can read as a
    # negative cost) and the median step, in one chart section; the pairs' estimates are the report's.
    metrics = run.data.metrics
    assert set(metrics) == {f"speed_check_run/{v}.{m}" for v in saved["samples_s"] for m in ("norm_ms", "step_ms")}
    assert metrics["speed_check_run/hand_layernorm.step_ms"] == pytest.approx(saved["summary"]["hand_layernorm"]["step_ms"]["diff"])
    assert min(v for k, v in metrics.items() if k.endswith(".norm_ms")) > 0
    door = open_store(store["uri"])
    found = load_speed_check(door, exp.experiment_id)
    assert found.interleaved == {} == found.norm_costs


def test_variants_bench_rejects_unknown_variants() -> None:
    with pytest.raises(ConfigError, match=r"unknown variant\(s\) nope; valid choices: "):
        variant_bench.parse_variants("torch_layernorm,nope")
