"""`python -m src.bench {norms,train,variants,overhead} [options] [key=value ...]`; `--help` on each lists its options."""

from __future__ import annotations

import argparse
import sys

from src.core import cli


def main(argv: list[str] | None = None) -> int:
    import torch

    from src.bench import norms, overhead, train, variants
    from src.bench.common import keep_freed_memory

    parser = cli.parser("python -m src.bench", __doc__, overrides=None)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module, help_text in (
        ("norms", norms, "forward / forward+backward time, GB/s and %% of copy of every norm variant"),
        ("train", train, "tokens/s, MFU and Lightning overhead of a training loop"),
        ("variants", variants, "training-step time of several norm variants, interleaved round-robin"),
        ("overhead", overhead, "the tool's own cost per job against a bare Hydra + Lightning + MLflow sweep"),
    ):
        sub = commands.add_parser(
            name, help=help_text, description=module.__doc__.splitlines()[0], epilog=cli.EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip
        module.add_arguments(sub)
        sub.add_argument("--threads", type=cli.int_option(1), help="torch CPU threads (default: torch's choice)")
        sub.add_argument(
            "--system-malloc",
            action="store_true",
            help="keep glibc's default thresholds (see keep_freed_memory)",
        )
        sub.set_defaults(run=module.main)
    args = parser.parse_args(argv)  # subcommands: argparse cannot intermix their options and overrides
    if not args.system_malloc:
        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)

    def bench() -> int:
        args.run(args)  # prints and writes the benchmark's report
        return cli.OK

    return cli.run(bench)


if __name__ == "__main__":
    sys.exit(main())
