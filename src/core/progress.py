"""The benchmarks' progress lines, one owner for their form: printed as a long measurement goes, and
passed on by a sweep's speed check (src/launch/speed_check.py) as they come. Torch-free."""

from __future__ import annotations

PROGRESS_S = 5.0  # seconds between progress lines of a long measurement
KERNELS = "norms' kernels:"  # the norms' own forward+backward (src/bench/kernels.py)
STEPS = "whole steps:"  # the interleaved training steps (src/bench/variants.py)
PREFIXES = (KERNELS, STEPS)


def say(prefix: str, text: str) -> None:
    print(f"{prefix} {text}", flush=True)
