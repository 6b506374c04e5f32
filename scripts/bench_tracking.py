"""What per-step MLflow logging costs a training step: off, a local SQLite file, a team server.

    .venv/bin/python scripts/bench_tracking.py [--rounds 10] [--steps 10] [--threads 1]

Starts its own team server (PostgreSQL + `mlflow server`, src/tracking/team_server.py) and a SQLite
store in a temporary folder, then times training steps of one small GPT-2 in rounds; in each round
every mode runs `--steps` steps in a shuffled order, logging what a run logs each step through the
project's own logger (`src.tracking.tracker._ClosedByTracker`):

    off            no logging
    sqlite         the local SQLite store, synchronous (the default store)
    server-sync    the team server, each step waiting for its HTTP request (MLflow's default)
    server         the team server through MLflow's asynchronous queue (what a run to a server does)

Prints each mode's step time over `off`: the mean of the per-round ratios with a bootstrap 95%
interval (steps of one round share the machine's load, so the ratio cancels most of it).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.model.gpt import GPTConfig, GPTModel  # noqa: E402
from src.tracking.store import Store  # noqa: E402
from src.tracking.team_server import TeamServer  # noqa: E402
from src.tracking.tracker import _ClosedByTracker  # noqa: E402

MODES = ("off", "sqlite", "server-sync", "server")
# What a training step logs (src/training/lit_module.py, log_every_n_steps=1).
KEYS = ("train/train_loss", "train/lr", "train/tokens_per_sec", "train/grad_norm", "train/step_time_s")


def bootstrap(values: list[float], n: int = 5000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--emb-dim", type=int, default=64, help="width of the GPT (2 layers, context 64, 4096 tokens)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: a second busy thread on 2 loaded cores stalls 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=4096, context_length=64, emb_dim=args.emb_dim, n_heads=4, n_layers=2, drop_rate=0.0)
    model = GPTModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, 4096, (8, 65))

    with tempfile.TemporaryDirectory() as tmp:
        server = TeamServer.start()
        try:
            sqlite = Store.connect(f"sqlite:///{Path(tmp) / 'mlflow.db'}")
            team = Store.connect(server.uri)  # bounds the HTTP client, as a run does

            def logger(store: Store, name: str, background: bool = False) -> _ClosedByTracker:
                """The run created outside the timing, as a Tracker creates it."""
                run_id = store.create_run(store.experiment_id("bench", None), name, {})
                return _ClosedByTracker(
                    experiment_name="bench", run_name=name, tracking_uri=store.uri, store=store, run_id=run_id, background=background
                )

            loggers = {"sqlite": logger(sqlite, "sqlite"), "server-sync": logger(team, "sync"), "server": logger(team, "async", True)}
            step = {m: 0 for m in MODES}
            times: dict[str, list[float]] = {m: [] for m in MODES}

            def run_steps(mode: str) -> float:
                start = time.perf_counter()
                for _ in range(args.steps):
                    logits = model(batch[:, :-1])
                    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    step[mode] += 1
                    if mode != "off":
                        loggers[mode].log_metrics({k: loss.item() for k in KEYS}, step[mode])
                return (time.perf_counter() - start) / args.steps

            run_steps("off")  # warm-up
            for _ in range(args.rounds):
                order = list(MODES)
                random.shuffle(order)
                for mode in order:
                    times[mode].append(run_steps(mode))
            loggers["server"].drain()
        finally:
            server.stop()
            shutil.rmtree(server.state_dir, ignore_errors=True)

    print(f"{args.rounds} rounds x {args.steps} steps, {torch.get_num_threads()} threads")
    print("| mode | step time (ms, median) | ratio to off (mean of rounds) | 95% interval |")
    print("|---|---|---|---|")
    for mode in MODES:
        ratios = [t / o for t, o in zip(times[mode], times["off"], strict=True)]
        low, high = bootstrap(ratios)
        print(f"| {mode} | {1000 * statistics.median(times[mode]):.1f} | {statistics.fmean(ratios):.3f} | [{low:.3f}, {high:.3f}] |")


if __name__ == "__main__":
    main()
