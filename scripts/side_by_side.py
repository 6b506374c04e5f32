"""What torch's threads cost when several processes train at once on one machine's cores.

    .venv/bin/python scripts/side_by_side.py [--copies 2] [--seconds 20]

Times the training steps of a small GPT-2 (2 layers of width 64, context 128, micro-batch 8)
in `--copies` processes started together, first with torch's default threads (every core) in each,
then with each process's share of the cores; prints every copy's steps/s and their sum. This is
what `tests/conftest.py` (`cores_per_worker`) decides from for `make test`'s two workers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def steps_per_second(seconds: float) -> float:
    import torch

    sys.path.insert(0, ROOT)
    from src.model.gpt import GPTConfig, GPTModel

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50257, context_length=128, emb_dim=64, n_heads=2, n_layers=2)
    model = GPTModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters())
    tokens = torch.randint(0, cfg.vocab_size, (8, cfg.context_length))
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        logits = model(tokens)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
    return steps / (time.perf_counter() - start)


def side_by_side(copies: int, threads: int | None, seconds: float) -> list[float]:
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [sys.executable, __file__, "--one", str(seconds)]
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    return [float(p.communicate()[0]) for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)  # a copy: print its steps/s
    args = parser.parse_args()
    if args.one is not None:
        print(steps_per_second(args.one))
        return
    cores = len(os.sched_getaffinity(0))
    share = max(1, cores // args.copies)
    for label, threads in (("default threads", None), (f"{share} thread(s) each", share)):
        rates = side_by_side(args.copies, threads, args.seconds)
        print(f"{args.copies} copies on {cores} cores, {label}: " + ", ".join(f"{r:.2f}" for r in rates) + f" steps/s (sum {sum(rates):.2f})")


if __name__ == "__main__":
    main()
