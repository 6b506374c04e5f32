"""`python -m src.bench {norms,train,variants} ...`; `--help` on each lists its options."""

from __future__ import annotations

import argparse

import torch

from src.bench import norms, train, variants
from src.bench.common import keep_freed_memory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m src.bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module, help_text in (
        ("norms", norms, "forward / forward+backward time, GB/s and %% of copy of every norm variant"),
        ("train", train, "tokens/s, MFU and Lightning overhead of a training loop"),
        ("variants", variants, "training-step time of several norm variants, interleaved round-robin"),
    ):
        sub = commands.add_parser(name, help=help_text, description=module.__doc__.splitlines()[0])
        module.add_arguments(sub)
        sub.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
        sub.add_argument(
            "--system-malloc",
            action="store_true",
            help="keep glibc's default thresholds (see keep_freed_memory)",
        )
        sub.set_defaults(run=module.main)
    args = parser.parse_args(argv)
    if not args.system_malloc:
        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.run(args)


if __name__ == "__main__":
    main()
