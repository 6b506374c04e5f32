"""The speed check where a norm's cost can be seen: each variant's norm forward+backward at the run's shapes.

A norm is ~1% of a small model's step, so whole steps timed in rounds cannot resolve it on a shared
machine; its own kernels can. For every variant (an opaque label and the model built from its
config) one real forward records the norm calls of a step — their input shapes and dtypes under
the run's autocast, and how often each occurs — then copies of those norm modules are timed
forward+backward at exactly those inputs (`compile` compiles each copy), interleaved: one sample of
every variant per round, the order rotating, for a budget of seconds. A sample is the norm time of
one training step, sum over distinct calls of (calls per step × seconds per call), so the
difference between two variants' samples predicts their step-time difference directly.

On the CPU the rounds run on one thread and read that thread's CPU clock (`cpu_threads`, `clock`),
which other processes on the machine neither stall nor get counted in.

Each variant's dispatched kernels are recorded on its most frequent norm call (`src.model.dispatch`).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from src.bench.common import synchronize
from src.bench.norms import case_functions
from src.core.progress import KERNELS, PROGRESS_S, say
from src.model.dispatch import Dispatch, norm_modules, record_dispatch

Context = Callable[[], AbstractContextManager[object]]
MIN_ROUNDS = 10  # an interval of a trimmed mean needs a handful of rounds whatever the budget
MAX_ROUNDS = 5000
SAMPLE_S = 2e-3  # a sample repeats its calls until the median variant's takes about this long
MAX_REPEATS = 64
WARMUP = 3


@dataclass
class NormCall:
    """One distinct norm input of a training step: the module that takes it and how often per step."""

    module: nn.Module
    shape: tuple[int, ...]
    dtype: torch.dtype
    calls: int

    def describe(self) -> dict[str, Any]:
        return {"module": type(self.module).__name__, "shape": list(self.shape), "dtype": str(self.dtype).removeprefix("torch."),
                "calls": self.calls}  # fmt: skip


def capture_norm_calls(model: nn.Module, x: torch.Tensor, context: Context) -> list[NormCall]:
    """The norm calls of one forward of `model` on `x` under `context`, grouped by (class, shape, dtype),
    most frequent first (the residual-stream norms before the per-head query/key norms)."""
    seen: dict[tuple[str, tuple[int, ...], torch.dtype], NormCall] = {}

    def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        inp = args[0]
        key = (type(module).__name__, tuple(inp.shape), inp.dtype)
        if key in seen:
            seen[key].calls += 1
        else:
            seen[key] = NormCall(module, tuple(inp.shape), inp.dtype, 1)

    handles = [m.register_forward_pre_hook(hook) for _, m in norm_modules(model)]
    try:
        # Eager, so that the hooks see every call of a compiled run's blocks too.
        with torch.no_grad(), context(), torch.compiler.set_stance("force_eager"):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return sorted(seen.values(), key=lambda c: -c.calls)


class NormWork:
    """The norm forward+backward of one training step of one variant, on private copies and inputs."""

    def __init__(
        self, calls: list[NormCall], device: torch.device, context: Context, compile: bool = False, seed: int = 0
    ) -> None:
        gen = torch.Generator(device=device).manual_seed(seed)
        self.calls = calls
        self.fns: list[Callable[[], None]] = []
        for call in calls:
            module = copy.deepcopy(call.module)
            run: nn.Module = torch.compile(module, dynamic=False) if compile else module  # type: ignore[assignment]
            x = torch.randn(call.shape, generator=gen, device=device).to(call.dtype)
            dy = torch.randn(call.shape, generator=gen, device=device).to(call.dtype)
            _, fwd_bwd = case_functions(run, x, dy)
            self.fns.append(_in_context(fwd_bwd, context))

    def once(self) -> None:
        for fn in self.fns:
            fn()

    def step_seconds(self, device: torch.device, repeats: int) -> float:
        """Seconds of norm work per training step: sum of calls × seconds per call (mean of `repeats`).

        Each call runs once untimed first. A step's norm runs on what the op before it just wrote; here
        the sample before it (another variant's, or a whole step) has evicted its data and code, and a
        cold first call counted in the mean made a run's per-call time depend on its `repeats`: 10 to 13
        repeats read every norm 10-25% slower than 17 to 22, an offset that every round of one run shared,
        so two runs' intervals each excluded the other's estimate."""
        total = 0.0
        for call, fn in zip(self.calls, self.fns, strict=True):
            fn()
            total += call.calls * _timed(fn, device, repeats) / repeats
        return total


def _in_context(fn: Callable[[], None], context: Context) -> Callable[[], None]:
    def run() -> None:
        with context():
            fn()

    return run


def clock(device: torch.device) -> Callable[[], float]:
    """The CPU time of this thread when torch runs on it alone (one CPU thread): time the scheduler
    gives to other processes is not counted, so a long sample and a short one are measured alike on
    a loaded machine. Wall-clock otherwise."""
    return time.thread_time if device.type == "cpu" and torch.get_num_threads() == 1 else time.perf_counter


def _timed(fn: Callable[[], None], device: torch.device, repeats: int) -> float:
    """Seconds for `repeats` calls (CUDA: events, read after synchronizing; CPU: `clock`)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    now = clock(device)
    t0 = now()
    for _ in range(repeats):
        fn()
    return now() - t0


def load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    with contextlib.suppress(OSError, AttributeError):
        return [round(v, 2) for v in os.getloadavg()]
    return None


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """torch's CPU threads set to `n` inside (None: unchanged)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_norm_work(
    works: dict[str, NormWork], device: torch.device, seconds: float, min_rounds: int = MIN_ROUNDS,
    step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Interleaved rounds of every variant's per-step norm work until `seconds` have passed; with
    `step` (the reference's whole training step), one of it in every round too, in the rotation.

    The step is the denominator that turns a norm's seconds into a share of a step. Timed once apart
    (a median of three steps) it moved with the load between runs while the norms' ratio held: the
    same kernels read -1.3% in one run and -2.3% in the next, each interval ±0.02% because the
    denominator's own spread was in none. Timed in the rounds, each round's norms are divided by its
    own step (src.report.judge.speed.predicted_rounds), and the step's spread is in the interval.

    Every sample repeats each call the same number of times for all variants (enough for the
    median variant to take ~SAMPLE_S), and the order rotates each round, so foreign load that lands
    on a round lands on its variants alike. On the CPU the caller runs it on one thread
    (`cpu_threads`): a multi-threaded kernel waits at every barrier for its slowest thread, so a
    process busy on one other core slows it whole; one thread just runs on a free core.
    """
    for work in works.values():
        for _ in range(WARMUP):
            work.once()  # compiles happen here
    synchronize(device)
    one = {name: work.step_seconds(device, 1) / max(1, sum(c.calls for c in work.calls)) for name, work in works.items()}
    typical = max(sorted(one.values())[len(one) // 2], 1e-7)  # the median: the identity costs ~nothing
    repeats = int(min(MAX_REPEATS, max(1, math.ceil(SAMPLE_S / typical))))
    if step is not None:
        step()  # warm-up: its allocations, the optimizer's state
    # A whole step is one more member of the rotation (None), so load lands on it as on the norms.
    names: list[str | None] = [*works, *([None] if step is not None else [])]
    samples: dict[str, list[float]] = {name: [] for name in works}
    steps: list[float] = []
    started = time.perf_counter()
    load_before = load()
    r, said = 0, started
    while r < MAX_ROUNDS and (r < min_rounds or time.perf_counter() - started < seconds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            if name is None:
                assert step is not None
                synchronize(device)
                steps.append(_timed(step, device, 1))
            else:
                samples[name].append(works[name].step_seconds(device, repeats))
        r += 1
        if (now := time.perf_counter()) - said >= PROGRESS_S:  # a sweep's speed check prints these as it goes
            said = now
            say(KERNELS, f"{r} rounds, {now - started:.0f} of {seconds:.0f} s, ~{max(0.0, seconds - (now - started)):.0f} s left")
    return {
        "samples_s": samples,  # norm seconds per training step, one per round
        **({"step_samples_s": steps, "step_s": float(sorted(steps)[len(steps) // 2])} if steps else {}),  # the reference's whole step, one per round
        "rounds": r,
        "repeats": repeats,
        "seconds": time.perf_counter() - started,
        "load": {"before": load_before, "after": load()},
        "calls": {name: [c.describe() for c in work.calls] for name, work in works.items()},
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "clock": "thread_cpu" if clock(device) is time.thread_time else "wall",
    }


def kernel_check(
    models: dict[str, nn.Module],
    x: torch.Tensor,
    context: Context,
    compile: bool,
    seconds: float,
    device: torch.device,
    step: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], dict[str, Dispatch]]:
    """The timed norm work (see `time_norm_work`, with `step` the reference's whole step in every
    round) and the dispatched kernels of every variant, whose model (on `device`, in training mode)
    takes the batch `x` of the run's shape."""
    calls = {name: capture_norm_calls(model, x, context) for name, model in models.items()}
    dispatch = {
        name: record_dispatch(found[0].module, torch.randn(found[0].shape, device=device).to(found[0].dtype), context, compile)
        for name, found in calls.items()
        if found
    }
    works = {name: NormWork(found, device, context, compile) for name, found in calls.items()}
    return time_norm_work(works, device, seconds, step=step), dispatch
