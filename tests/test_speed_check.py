"""The speed a sweep reports comes from its variants' steps interleaved after the jobs, not from the
jobs' own tokens/s (one after another on a shared machine, that measures the machine's load)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TinySweep, unwrapped
from mlflow.tracking import MlflowClient
from scipy import stats

from src.bench.kernels import NormCall, NormWork, clock, cpu_threads, time_norm_work
from src.core.paths import ConfigError, compose
from src.core.schema import SPEED_KERNEL_S_MAX
from src.core.terminal import WIDTH
from src.launch.speed_check import bench_command, current_check
from src.model.dispatch import classify, record_dispatch
from src.model.norms import make_norm
from src.report.judge.speed import (
    MIN_CHECK_ROUNDS,
    Agreement,
    SpeedVerdict,
    compare_speed,
    decisions,
    norm_shares,
)
from src.report.words.speed import sentence
from src.report.words.table import CHECK_SPEED_HEADER
from src.stats.inference import Interval, t_quantile
from src.stats.verdicts import SpeedWord, speed_margin
from src.tracking.store import Store
from src.training.run_spec import validate

JOBS = [
    {"overrides": [f"norm={n}", f"seed={s}", "model.n_layers=1", "experiment_name=x", "++hydra.x=1"]}
    for n in ("hand_layernorm", "torch_layernorm")
    for s in (0, 1)
]


def test_bench_command_times_the_swept_variants_on_the_sweeps_config(tmp_path: Path) -> None:
    command = bench_command(JOBS, 20, tmp_path)
    assert command == [
        sys.executable, "-m", "src.bench", "variants", "--variants", "hand_layernorm,torch_layernorm",
        "--rounds", "20", "--out", str(tmp_path), "model.n_layers=1", "experiment_name=x",
    ]  # fmt: skip
    assert bench_command(JOBS[:1], 20, tmp_path) is None  # one variant: nothing to compare


def test_speed_rounds_is_checked_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match=r"report.speed_rounds: must be 0 .* or an integer >= 2"):
        validate(compose(["report.speed_rounds=1"]))
    for bad in ("-1", "1e9", "inf", "nan"):  # 1e9 overflowed the check's timeout after the whole sweep
        with pytest.raises(ConfigError, match=rf"report.speed_kernel_s: must be a number of seconds in \[0, {SPEED_KERNEL_S_MAX}\]"):
            validate(compose([f"report.speed_kernel_s={bad}"]))
    validate(compose([f"report.speed_kernel_s={SPEED_KERNEL_S_MAX}"]))  # the bound itself is accepted
    assert compose(["experiment=norm_sweep"]).report.speed_rounds > 0  # `make sweep` measures speed


@pytest.mark.slow
def test_the_sweep_reports_interleaved_speed(tiny_sweep: TinySweep) -> None:
    first = tiny_sweep.outputs[0]  # the multirun with report.speed_rounds=2
    assert max(map(len, first.splitlines())) <= WIDTH  # all of it fits a terminal; read here with wrapped lines joined
    first = unwrapped(first)
    assert "[normsweep] speed: 1 s of their norms' kernels, then 2 interleaved rounds of hand_layernorm,torch_layernorm" in first
    assert "warning: speed check" not in first and "[normsweep] speed check took" in first
    assert CHECK_SPEED_HEADER in first  # the table's speed column is that measurement
    # A verdict for the pair, predicted from the norms' kernels and checked by whole steps, with the load.
    assert "Speed (python -m src.bench variants" in first and "load average" in first
    (line,) = [x for x in first.splitlines() if x.startswith("torch_layernorm vs hand_layernorm:")]
    assert any(f": {v}" in line for v in ("faster", "slower", "equivalent within ±2%", "unresolved"))
    assert "predicted from the norms' own cost" in line and "whole steps measured" in line
    assert "hand_layernorm fwd=composite bwd=composite; torch_layernorm fwd=fused bwd=fused" in first


@pytest.mark.slow
def test_each_training_run_records_the_kernels_its_norm_ran(tiny_sweep: TinySweep, tiny_client: MlflowClient) -> None:
    exp = tiny_client.get_experiment_by_name("tiny_sweep")
    runs = [r for r in tiny_client.search_runs([exp.experiment_id]) if r.data.tags.get("norm") in ("hand_layernorm", "torch_layernorm")]
    assert len(runs) == 4
    for run in runs:
        want = "fwd=fused bwd=fused" if run.data.tags["norm"] == "torch_layernorm" else "fwd=composite bwd=composite"
        assert run.data.tags["normsweep.norm_dispatch"] == want
    saved = tiny_client.download_artifacts(runs[0].info.run_id, "norm_dispatch.json", str(tiny_sweep.report_dir.parent))
    assert '"backward"' in Path(saved).read_text()


@pytest.mark.slow
def test_a_check_newer_than_every_result_is_kept(tiny_sweep: TinySweep, tmp_path: Path) -> None:
    """Re-running a finished sweep keeps its speed check; a run finished since, or other variants, measure again."""
    db = tmp_path / "mlflow.db"  # a copy: the shared sweep's store stays as it was
    shutil.copy(tiny_sweep.uri.removeprefix("sqlite:///"), db)
    store = Store.connect(f"sqlite:///{db}")
    experiment_id = store.find_experiment("tiny_sweep").experiment_id
    # The no_norm multirun after the check diverged: FAILED runs, no new result.
    assert current_check(store, experiment_id, ["torch_layernorm", "hand_layernorm"]) is not None
    assert current_check(store, experiment_id, ["hand_layernorm", "torch_layernorm", "no_norm"]) is None
    assert current_check(store, experiment_id, ["hand_layernorm"]) is None
    store.terminate(store.create_run(experiment_id, "torch_layernorm-s2", {"norm": "torch_layernorm"}), "FINISHED")
    assert current_check(store, experiment_id, ["torch_layernorm", "hand_layernorm"]) is None


# --- which kernels ran -----------------------------------------------------------------------------


def test_dispatch_is_read_from_the_ops_that_ran() -> None:
    x = torch.randn(64, 32)
    for context in (contextlib.nullcontext, lambda: torch.autocast("cpu", dtype=torch.bfloat16)):
        got = {k: record_dispatch(make_norm(k, 32, 1e-5), x, context) for k in ("hand_layernorm", "torch_layernorm", "no_norm")}
        assert got["torch_layernorm"].summary() == "fwd=fused bwd=fused"
        assert "aten::native_layer_norm_backward" in got["torch_layernorm"].backward
        assert got["hand_layernorm"].summary() == "fwd=composite bwd=composite"
        assert got["no_norm"].summary() == "fwd=none bwd=none"
        assert all(d.warning(k) is None for k, d in got.items())
    # On this torch's CPU build nn.RMSNorm calls aten::_fused_rms_norm, which runs pow, mean, rsqrt... one by one.
    rms = record_dispatch(make_norm("torch_rmsnorm", 32, 1e-5), x)
    assert "aten::_fused_rms_norm" in rms.forward and rms.fwd == "composite"
    assert rms.warning("torch_rmsnorm").startswith("torch_rmsnorm: RMSNorm names a fused kernel but its forward and backward ran a composite path")
    assert classify(["Torch-Compiled Region: 0/0", "aten::mul", "aten::add"]) == "compiled"
    assert classify(["_RMSNormFunctionBackward", "aten::empty", "aten::sum"]) == "fused"  # its own kernel, partials summed


# --- the verdicts ----------------------------------------------------------------------------------


def test_speed_verdicts_by_hand() -> None:
    rng = np.random.default_rng(0)
    n, step = 200, 0.1
    norm = 0.004 * (1 + rng.normal(0, 0.02, n))  # norm seconds per step, 2% noise per round
    steps = step * (1 + rng.normal(0, 0.01, n))
    check = {
        "samples_s": {"a": steps, "same": steps * (1 + rng.normal(0, 0.01, n)), "costly": steps + 0.01,
                      "contradicting": steps * 0.8, "noisy": steps},
        "kernel": {"step_s": step, "samples_s": {"a": norm, "same": norm * (1 + rng.normal(0, 0.02, n)), "costly": norm + 0.01,
                   "contradicting": norm + 0.01, "noisy": norm + 0.0015 + rng.normal(0, 0.03, n)}},
    }  # fmt: skip
    pairs = [("a", b) for b in ("same", "costly", "contradicting", "noisy")]
    got = {v.b: v for v in compare_speed(check, pairs, margin=0.02)}
    assert got["same"].verdict == "equivalent" and got["same"].agreement == Agreement.AGREE
    assert got["costly"].verdict == "slower" and got["costly"].agreement == Agreement.AGREE  # +10 ms of a 100 ms step
    assert np.expm1(got["costly"].predicted.diff) == pytest.approx(0.1, rel=1e-6)
    assert np.exp(got["costly"].norm_ratio.diff) == pytest.approx(3.5, rel=0.01)
    # 200 whole-step rounds at -20% against a +10% prediction: precise, apart, a real disagreement.
    assert got["contradicting"].agreement == Agreement.DISAGREE
    assert "they disagree: the whole step moved by other than the norms' own cost" in sentence(got["contradicting"])
    noisy = got["noisy"]
    assert noisy.verdict == "unresolved" and noisy.rounds_needed > n
    assert f"about {noisy.rounds_needed} kernel rounds would settle it" in sentence(noisy)


@pytest.mark.alone  # it times kernels
def test_a_samples_time_a_call_does_not_depend_on_its_repeats() -> None:
    """A norm sample after memory traffic (as in the rounds: another variant's sample, or a whole step,
    before it) reads about the same seconds a call on 2 repeats as on 16 (the least disturbed sample of
    each: the first call's cost is in every sample, another process's only in some). Its first call ran
    cold, 179 µs where the next ones took 45 (torch_layernorm at 32×32, load 8): 2 repeats read 2.0-2.3×
    16's, and a run whose repeats came out at 10 read every norm 10-25% slower than a run at 20, in all its
    rounds alike. With an untimed call first, 1.0-1.4× (the sample's own fixed cost, spread over 2 calls).

    The cold reading is taken in the same rounds, so the test holds what the untimed call buys on the
    host it runs on: one CI host read 1.53× with it, where this machine reads 1.0-1.4×."""
    device = torch.device("cpu")
    evict = torch.randn(8 * 2**20)  # 32 MiB, more than the caches
    work = NormWork([NormCall(torch.nn.LayerNorm(32), (32, 32), torch.float32, calls=13)], device, contextlib.nullcontext)
    warm: dict[int, list[float]] = {2: [], 16: []}
    cold: dict[int, list[float]] = {2: [], 16: []}
    with cpu_threads(1):
        now = clock(device)
        for _ in range(3):
            work.once()
        for _ in range(40):
            for repeats in warm:
                evict.mul_(1.0)
                warm[repeats].append(work.step_seconds(device, repeats))  # a call's mean, × 13
                evict.mul_(1.0)
                start = now()  # the same calls with no untimed one first
                for _ in range(repeats):
                    work.fns[0]()
                cold[repeats].append(13 * (now() - start) / repeats)
    ratio, cold_ratio = (min(per_call[2]) / min(per_call[16]) for per_call in (warm, cold))
    # About the same, or (on a host where even a warm sample's fixed cost shows) at most half the cold excess.
    assert ratio > 0.8 and (ratio < 1.5 or ratio - 1 < (cold_ratio - 1) / 2), f"{ratio:.2f}x with an untimed call first, {cold_ratio:.2f}x without"


class _ExtraPass(torch.nn.Module):
    """nn.LayerNorm plus `extra` more LayerNorms of the same input: a known, injected extra cost."""

    def __init__(self, width: int, extra: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        for _ in range(self.extra):
            y = y + self.norm(x)
        return y


def _verdicts(seconds: float) -> dict[str, str]:
    shape = (1024, 128)
    works = {
        name: NormWork([NormCall(module, shape, torch.float32, calls=9)], torch.device("cpu"), contextlib.nullcontext)
        for name, module in (("ln", torch.nn.LayerNorm(128)), ("ln_again", torch.nn.LayerNorm(128)), ("ln_plus", _ExtraPass(128, 2)))
    }  # fmt: skip
    with cpu_threads(1):  # as the speed check runs it on the CPU
        kernel = time_norm_work(works, torch.device("cpu"), seconds)
    # A step 20× the plain norm's cost: the extra passes (~2-3× the norm) are ~+10% of it.
    kernel["step_s"] = 20 * float(np.median(kernel["samples_s"]["ln"]))
    check = {"samples_s": {"ln": [kernel["step_s"]]}, "kernel": kernel}
    return {v.b: v.verdict for v in compare_speed(check, [("ln", "ln_again"), ("ln", "ln_plus")], margin=0.02)}


@pytest.mark.slow
@pytest.mark.alone  # its hog takes one core; a second test worker must not take the other
def test_kernel_verdicts_survive_a_cpu_hog() -> None:
    quiet = _verdicts(1.5)
    # A busy process on one core, started here: the same variant under two names is never
    # faster or slower, and the injected extra work is found, as on the quiet machine.
    hog = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"])
    try:
        time.sleep(0.2)
        loaded = _verdicts(1.5)
    finally:
        hog.kill()
        hog.wait()
    for verdicts in (quiet, loaded):
        assert verdicts["ln_again"] in ("equivalent", "unresolved"), (quiet, loaded)
        assert verdicts["ln_plus"] == "slower", (quiet, loaded)



# Six blocks 32 wide: the norms are 1-4% of the step, as cpu_small's are, in seconds a check.
HOG_BENCH = ["model.n_layers=6", "model.emb_dim=32", "model.n_heads=2", "model.context_length=16",
             "optim.micro_batch_size=2", "logger=none"]  # fmt: skip
STUDY_FIVE = ("hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm", "no_norm")


def _check_words(tmp_path: Path) -> dict[tuple[str, str], SpeedVerdict]:
    """The sweep's speed check (its kernels, with a whole step of the reference in every round) of the
    study's five at HOG_BENCH, every pair read at the sweep's 2% margin."""
    from src.bench import variants as variant_bench

    args = argparse.Namespace(
        variants=",".join(STUDY_FIVE), variant_overrides=None, rounds=2, warmup=1, batch=None, seed=0, out=tmp_path,
        kernel_seconds=1.5, kernel_threads=1, share_sizes="", share_rounds=0, overrides=HOG_BENCH,
    )  # fmt: skip
    check = variant_bench.run(args)
    assert len(check["kernel"]["step_samples_s"]) == check["kernel"]["rounds"] >= 10  # a step in every round
    pairs = [(a, b) for i, a in enumerate(STUDY_FIVE) for b in STUDY_FIVE[i + 1 :]]
    return {(v.a, v.b): v for v in compare_speed(check, pairs, margin=0.02)}


def _both_true_at_the_margins_edge(x: SpeedVerdict, y: SpeedVerdict) -> bool:
    """One reads equivalent, the other faster (or slower), and the effect sits at the margin's edge, where
    both words are true: the interval of the one with a difference reaches inside the margin, or the two
    estimates lie either side of the margin's edge, their intervals apart by less than the narrower one's
    width. Hogs moved such a pair (-1.9% [-2.0, -1.7] faster quiet) by more than its interval's width, to equivalent;
    and on a quiet AMD EPYC host torch_rmsnorm vs torch_layernorm read +2.10 [1.89, 2.32], +1.88 [1.63, 2.13]
    and +2.07 [1.81, 2.32] in three runs, beside hogs +2.07, +2.01, +2.03: a run's estimate moves by about
    its interval's width, so one run read slower at +2.2% [+2.0, +2.4] and another equivalent at +1.86%
    [+1.74, +1.97], 0.05 points apart. A faster or slower interval farther beyond the margin than that
    beside an equivalent one is still a contradiction."""
    words = {x.verdict, y.verdict}
    if SpeedWord.EQUIVALENT not in words or words & {SpeedWord.FASTER, SpeedWord.SLOWER} == set():
        return False
    room = speed_margin(x.margin)
    inside, apart = (x, y) if x.verdict == SpeedWord.EQUIVALENT else (y, x)
    if -room < apart.predicted.low < room or -room < apart.predicted.high < room:
        return True
    edge = room if apart.predicted.diff > 0 else -room
    lower, upper = sorted((inside.predicted, apart.predicted), key=lambda i: i.diff)
    narrower = min(i.high - i.low for i in (inside.predicted, apart.predicted))
    return lower.diff < edge < upper.diff and upper.low - lower.high < narrower


def _pair_read(diff: float, se: float) -> SpeedVerdict:
    """torch_rmsnorm vs torch_layernorm's word at the sweep's 2% margin, from a predicted log ratio over 15 rounds."""
    half = t_quantile(14) * se
    p = float(2 * stats.t.sf(abs(diff) / se, 14))
    predicted = Interval("tukey_mclaughlin", 15, diff, diff - half, diff + half, p, se=se, df=14, sd=se * 15**0.5)
    return SpeedVerdict("torch_layernorm", "torch_rmsnorm", predicted, None, None, decisions([predicted], 0.02)[0], 0.02)


def test_the_margins_edge_is_told_from_a_contradiction() -> None:
    """The hog test's rule on the readings it met: two runs either side of the margin's edge, 0.05 points
    apart, are the edge; an equivalent and a slower reading an interval's width or more apart are not."""
    slower, equivalent = _pair_read(0.02220, 0.000918), _pair_read(0.018564, 0.000642)
    assert (slower.verdict, equivalent.verdict) == (SpeedWord.SLOWER, SpeedWord.EQUIVALENT)
    assert _both_true_at_the_margins_edge(slower, equivalent) and _both_true_at_the_margins_edge(equivalent, slower)
    far, near_zero = _pair_read(0.035, 0.002), _pair_read(0.0, 0.005)
    assert (far.verdict, near_zero.verdict) == (SpeedWord.SLOWER, SpeedWord.EQUIVALENT)
    assert not _both_true_at_the_margins_edge(far, near_zero)
    assert not _both_true_at_the_margins_edge(far, equivalent)  # 0.85 points apart, each interval under 0.5 wide
    assert not _both_true_at_the_margins_edge(slower, _pair_read(0.02220, 0.000918))  # one word: not this rule's


@pytest.mark.slow
@pytest.mark.alone  # its hogs take every core; no other test may run beside it
def test_the_check_gives_every_pair_the_same_reading_quiet_and_beside_a_cpu_hog(tmp_path: Path) -> None:
    """The check run quiet, then with a CPU-bound process on each core: every pair keeps its word, or its
    two 95% intervals overlap, or the pair sits at the margin's edge, where both words are true. One median step timed apart moved 2× with the load (1.6 s and 0.74 s), and
    the same kernels read -1.31% [-1.33, -1.29] equivalent and -2.30% [-2.31, -2.29] faster. With the step
    in every round, a pair's estimate still moved by up to 40% between runs, each interval excluding the
    other's: a norm sample's first call ran cold, and a run whose repeats came out few read every norm
    10-25% slower, in all its rounds (test_a_samples_time_a_call_does_not_depend_on_its_repeats)."""
    quiet = _check_words(tmp_path / "quiet")
    hogs = [subprocess.Popen(["nice", "-n", "10", sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        loaded = _check_words(tmp_path / "loaded")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert quiet.keys() == loaded.keys() and len(quiet) == 10
    for pair, q in quiet.items():
        v = loaded[pair]
        overlap = q.predicted.low <= v.predicted.high and v.predicted.low <= q.predicted.high
        assert q.verdict == v.verdict or overlap or _both_true_at_the_margins_edge(q, v), (pair, sentence(q), sentence(v))
    words = {str(v.verdict) for v in quiet.values()}
    assert len(words) > 1, words  # not a test every pair passes by reading "equivalent"


def test_a_copy_re_run_during_anothers_speed_check_waits_and_keeps_it(
    migrated_store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A re-run started during the first copy's speed check ran a second one at the
    same time (two bench-variants runs, each measured under the other's load). The check takes the
    experiment's claim as a job takes its config's: this copy waits for it, then keeps its result."""
    import threading

    from src.launch.speed_check import SPEED_CLAIM, run_speed_check
    from src.report.read.runs import SPEED_CHECK_ARTIFACT
    from src.tracking.sweep import take_lock
    from src.tracking.tags import BENCH_TAG, BENCH_VARIANTS

    store = Store.connect(migrated_store["uri"])
    experiment_id = store.experiment_id("speed_claim", migrated_store["artifacts"])
    held, _ = take_lock(store, experiment_id, SPEED_CLAIM, 300)  # the first copy, measuring
    assert held is not None

    def first_copy_ends() -> None:
        run_id = store.create_run(experiment_id, "bench-variants", {BENCH_TAG: BENCH_VARIANTS})
        store.log_text(run_id, json.dumps({"settings": {"variants": ["hand_layernorm", "torch_layernorm"]}}), SPEED_CHECK_ARTIFACT)
        store.terminate(run_id, "FINISHED")
        held.release()

    timer = threading.Timer(3.0, first_copy_ends)
    timer.start()
    jobs = [{"variant": n, "overrides": [f"norm={n}", "seed=0"]} for n in ("hand_layernorm", "torch_layernorm")]
    started = time.monotonic()
    run_speed_check(jobs, 2, tmp_path / "bench", 30, None, store, experiment_id, stale_after_s=300)
    timer.join()
    out = unwrapped(capsys.readouterr().out).splitlines()  # each message one line, however it was wrapped
    assert out[0].startswith("[normsweep] speed: waiting for the speed check another copy of the sweep is running (opened by"), out
    assert out[1].startswith("[normsweep] speed: kept the check of"), out  # not measured a second time
    assert len(out) == 2 and time.monotonic() - started < 20
    assert len(store.runs(experiment_id, f"tags.`{BENCH_TAG}` = '{BENCH_VARIANTS}'")) == 1
    assert not any(k.startswith("normsweep.claim.") for k in store.experiment_tags(experiment_id))  # released


# --- the whole-step check of a prediction: made-up checks shaped like variants.json, through compare_speed --


def _check(step_ratios: list[float], predicted: float, kernel_rounds: int = 200, seed: int = 0) -> dict:
    """A check of a vs b: whole steps of b at `step_ratios` × a's per round, and b's norm costing
    `predicted` of a's 100 ms step more than a's (0.2% round-to-round noise on each norm)."""
    rng = np.random.default_rng(seed)
    step, norm = 0.1, 0.004
    steps_a = step * (1 + rng.normal(0, 0.001, len(step_ratios)))
    norms_a = norm * (1 + rng.normal(0, 0.002, kernel_rounds))
    norms_b = norms_a + predicted * step + norm * rng.normal(0, 0.002, kernel_rounds)
    return {"samples_s": {"a": list(steps_a), "b": list(steps_a * np.asarray(step_ratios))},
            "kernel": {"step_s": step, "samples_s": {"a": list(norms_a), "b": list(norms_b)}}}  # fmt: skip


def _one(check: dict, margin: float = 0.02) -> SpeedVerdict:
    (v,) = compare_speed(check, [("a", "b")], margin)
    return v


LABELLED = re.compile(r"([+-]?\d+\.\d+)(%|×) \[([+-]?\d+\.\d+)(?:%|×), ([+-]?\d+\.\d+)(?:%|×)\] \((\d+)% interval\)")


def _intervals_say_their_level(line: str) -> None:
    """Every interval printed in the line says its level, and the estimate before it lies inside it."""
    found = LABELLED.findall(line)
    assert len(found) == line.count("["), line  # no bracket without its estimate and level
    for est, _, low, high, _ in found:
        assert float(low) <= float(est) <= float(high), line


def test_two_step_rounds_never_agree() -> None:
    """Two rounds (df = 1): an interval of hundreds of percent overlaps any prediction; it is no check."""
    v = _one(_check([1.5, 0.6], predicted=0.01))
    assert v.measured.n == 2 and v.measured.high - v.measured.low > 1  # the useless interval the old rule read
    assert v.agreement == Agreement.TOO_IMPRECISE
    line = sentence(v)
    assert "agree" not in line and "over 2 round(s): too imprecise to check the prediction" in line, line
    assert "so the verdict rests on the norms' own cost alone." in line
    _intervals_say_their_level(line)


def test_a_narrow_interval_from_too_few_rounds_is_no_check_either() -> None:
    """Four rounds that happen to lie close: the trimmed mean cuts none of them, so a burst in one is uncut."""
    v = _one(_check([1.010, 1.011, 1.009, 1.010], predicted=0.01))
    assert v.measured.n < MIN_CHECK_ROUNDS and v.measured.high - v.measured.low < 0.01
    assert v.agreement == Agreement.TOO_IMPRECISE and "agree" not in sentence(v)


def test_a_wide_interval_from_many_rounds_is_no_check() -> None:
    """40 rounds at 30% spread: a 95% interval wider than the ±2% margin overlaps a prediction a margin off."""
    ratios = list(1 + np.random.default_rng(1).normal(0, 0.3, 40).clip(-0.9))
    v = _one(_check(ratios, predicted=0.01))
    assert v.measured.n == 40 and v.agreement == Agreement.TOO_IMPRECISE
    assert "over 40 round(s): too imprecise" in sentence(v) and "agree" not in sentence(v)


def test_thirty_tight_rounds_that_exclude_the_prediction_disagree() -> None:
    """Precise intervals apart are a real disagreement, not noise, even where the step level's interval is
    the wider (the old rule's "too noisy to use")."""
    ratios = list(1.10 * (1 + np.random.default_rng(2).normal(0, 0.002, 30)))
    v = _one(_check(ratios, predicted=0.01))
    assert v.measured.se > v.predicted.se and v.measured.low > v.predicted.high  # precise, apart, the wider
    assert v.agreement == Agreement.DISAGREE
    line = sentence(v)
    assert "they disagree" in line and "the whole step moved by other than the norms' own cost" in line, line
    assert "so the verdict rests on the norms' own cost alone." in line
    assert "noisy" not in line and "agree." not in line
    _intervals_say_their_level(line)


def test_a_wide_interval_that_excludes_the_prediction_disagrees() -> None:
    """Whole steps +61% [+19%, +118%] against a +1.5% prediction: too wide to bear a prediction out,
    yet it excludes this one, so the step moved by more than the norms: a disagreement, not "too imprecise"."""
    ratios = list(1.6 * (1 + np.random.default_rng(4).normal(0, 0.3, 30)).clip(0.8))
    v = _one(_check(ratios, predicted=0.015))
    assert v.measured.low > v.predicted.high and v.measured.high - v.measured.diff > 0.02  # apart, and wide
    assert v.agreement == Agreement.DISAGREE
    line = sentence(v)
    assert "they disagree" in line and "too imprecise" not in line, line
    _intervals_say_their_level(line)


def test_each_kernel_round_is_divided_by_its_own_step() -> None:
    """Load that slows a round's norms and its step alike cancels: half the rounds at twice the time (a
    burst, or a step that lands on its slow mode: 0.65 s and 1.6 s alternate on one thread here) read
    the same +5% as the quiet half. One median step for every round read them as +2.5% and +5%."""
    rng = np.random.default_rng(5)
    n, step, norm = 40, 0.1, 0.004
    slow = np.where(np.arange(n) % 5 < 3, 2.0, 1.0)  # 3 rounds in 5 twice as slow: the median step is a slow one
    norms_a = norm * (1 + rng.normal(0, 0.002, n)) * slow
    norms_b = norms_a + 0.05 * step * slow
    steps = step * slow * (1 + rng.normal(0, 0.002, n))
    check = {"samples_s": {"a": [step] * 5, "b": [step * 1.05] * 5},
             "kernel": {"step_s": float(np.median(steps)), "step_samples_s": list(steps),
                        "samples_s": {"a": list(norms_a), "b": list(norms_b)}}}  # fmt: skip
    v = _one(check)
    assert np.expm1(v.predicted.diff) == pytest.approx(0.05, rel=0.01)
    assert v.predicted.high - v.predicted.low < 0.002 and v.verdict == "slower"
    assert norm_shares(check)["a"] == pytest.approx(norm / step, rel=0.01)


def test_a_norms_share_is_named_with_its_model_and_device() -> None:
    """The headline and the table say one share per norm, and where it holds: a share of one model's step
    on one chip (claim 8 reads its own, at the sizes it names)."""
    from types import SimpleNamespace

    from src.report.words.headline import speed_line
    from src.report.words.speed import share_where

    check = _check([1.0] * 10, predicted=0.01)
    check["kernel"] |= {"threads": 1, "step_samples_s": [0.1] * 200}
    check |= {"settings": {"model": "cpu_small"}, "environment": {"env.device": "Intel Xeon (2 cores)"}}
    assert share_where(check) == "of a cpu_small step on Intel Xeon (2 cores), 1 thread(s)"
    assert norm_shares(check)["a"] == pytest.approx(0.04, rel=0.01)
    verdicts = compare_speed(check, [("a", "b")], 0.02)
    checked = SimpleNamespace(speed_verdicts=verdicts, speed=SimpleNamespace(check=check), margins=SimpleNamespace(speed=0.02))
    line = speed_line(checked)  # type: ignore[arg-type]  # the fields of an Analysis it reads
    assert "the norm is 4.0% (a) to 5.0% (b) of a cpu_small step on Intel Xeon (2 cores), 1 thread(s)." in line, line
    # A model the sweep's overrides reshaped is named as it ran, not as its config's name alone.
    check["settings"]["model_overrides"] = ["model.n_layers=1", "model.emb_dim=32"]
    assert share_where(check) == "of a cpu_small step (model.n_layers=1, model.emb_dim=32) on Intel Xeon (2 cores), 1 thread(s)"


def test_overlapping_precise_intervals_agree() -> None:
    ratios = list(1.01 * (1 + np.random.default_rng(3).normal(0, 0.002, 30)))
    v = _one(_check(ratios, predicted=0.01))
    assert v.agreement == Agreement.AGREE
    line = sentence(v)
    assert line.endswith(": the two agree.") and "too imprecise" not in line
    _intervals_say_their_level(line)


def test_no_step_rounds_no_check() -> None:
    check = _check([1.0] * 10, predicted=0.01)
    del check["samples_s"]["b"]
    v = _one(check)
    assert v.agreement == Agreement.NO_STEP_ROUNDS and v.measured is None
    line = sentence(v)
    assert "whole steps" not in line and "agree" not in line and line.endswith(".")
    _intervals_say_their_level(line)
