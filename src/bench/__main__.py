"""`python -m src.bench {norms,train,variants,overhead,interpreter} [options] [key=value ...]`; `--help` on each lists its options."""

from __future__ import annotations

import argparse
import importlib
import sys

from src.core import cli

# command -> (its module, its help); only the module of the command given is imported: `overhead`
# times subprocesses and imports no torch, the others import it with their module.
COMMANDS = {
    "norms": ("src.bench.norms", "forward / forward+backward time, GB/s and %% of copy of every norm variant"),
    "train": ("src.bench.train", "tokens/s, MFU and Lightning overhead of a training loop"),
    "variants": ("src.bench.variants", "training-step time of several norm variants, interleaved round-robin"),
    "overhead": ("src.bench.overhead", "the tool's own cost per job against a bare Hydra + Lightning + MLflow sweep"),
    "interpreter": ("src.bench.interpreter", "a tiny job's CPU on another Python interpreter against this one"),
}


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser | None]:
    """The parser and, for the command named in `argv` (the first word that is one), its subparser
    with its full options."""
    parser = cli.parser("python -m src.bench", __doc__, overrides=None)
    sub = None
    commands = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    chosen = next((arg for arg in argv if arg in COMMANDS), None)
    for name, (module_name, help_text) in COMMANDS.items():
        if name != chosen:
            commands.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        sub = commands.add_parser(
            name, help=help_text, description=module.__doc__.splitlines()[0], epilog=cli.EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip
        module.add_arguments(sub)
        sub.add_argument("--threads", type=cli.int_option(1), help="torch CPU threads (default: torch's choice)")
        sub.add_argument(
            "--system-malloc",
            action="store_true",
            help="keep glibc's default thresholds (see src.bench.files.keep_freed_memory)",
        )
        sub.set_defaults(run=module.main)
    return parser, sub


def main(argv: list[str] | None = None) -> int:
    from src.bench.files import keep_freed_memory

    argv = list(sys.argv[1:] if argv is None else argv)
    parser, sub = build_parser(argv)
    # subcommands: argparse cannot intermix their options and overrides. An unknown option is named
    # before a missing command (argparse would say only "the following arguments are required").
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        (sub or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error(f"the following arguments are required: command (one of {', '.join(COMMANDS)})")
    if not args.system_malloc:
        keep_freed_memory()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    def bench() -> int:
        args.run(args)  # prints and writes the benchmark's report
        return cli.OK

    return cli.run(bench)


if __name__ == "__main__":
    sys.exit(main())
