"""One command-line style for every entry point, and its exit codes, written once.

    python -m src.<command> [--option ...] [key=value ...]

Options are argparse's (`--help` lists them, then the exit codes below); every positional
`key=value` is an override of the training config, with the syntax of `python -m src.train`
(`paths.mlflow_db=/x/mlflow.db`, `experiment=norm_sweep`, `+key=value`, `~key`), so each command
reads the store, presets and folders that training with the same overrides uses. `python -m src.train`
is Hydra's own command line (`-m`, `--cfg job`, `--help`) with the same overrides and exit codes.

Exit codes: `EXIT_CODES` below, which `--help` prints and docs/configuration.md tabulates.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from src.core.paths import ConfigError, compose_error_line

OK = 0
FAILED = 1
USAGE = 2
EXIT_CODES = {
    OK: "done",
    FAILED: "a run, a check or a read failed (`error: ...` on one line)",
    USAGE: "the command line or the config is wrong (`config error: <key>: ...` on one line); nothing was run",
}
EPILOG = "exit status:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())
OVERRIDES_HELP = "training config overrides, as for python -m src.train (e.g. paths.mlflow_db=/x/mlflow.db)"

# What a wrong command line or config raises: our checks (ConfigError, naming the key), Hydra's
# override parser and composition (an unknown group option, a malformed override), OmegaConf's types.
CONFIG_ERRORS: tuple[type[BaseException], ...] = (ConfigError, HydraException, OmegaConfBaseException)


def usage_error(prog: str, message: str) -> str:
    """A usage error (`--bogus-opt`) as the one `config error:` line every refusal is, not argparse's
    usage block: the option is named, and where the options are listed."""
    return f"config error: {one_line(message)} ({prog} --help lists the options)"


def exit_with(line: str) -> NoReturn:
    """Stop with a one-line refusal; `exit_status` prints it and gives its status."""
    raise SystemExit(line)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one `config error:` line with status USAGE."""

    def error(self, message: str) -> NoReturn:
        print(usage_error(self.prog, message), file=sys.stderr)
        raise SystemExit(USAGE)


def parser(prog: str, doc: str | None, overrides: str | None = OVERRIDES_HELP) -> argparse.ArgumentParser:
    """An entry point's parser: its docstring as the description, the exit codes as the epilog, and
    (unless `overrides` is None) the trailing `key=value` overrides."""
    made = OneLineParser(
        prog=prog, description=doc, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if overrides is not None:
        made.add_argument("overrides", nargs="*", metavar="key=value", help=overrides)
    return made


def check_port(value: object, field: str) -> int:
    """A TCP port to listen on (1-65535), or ConfigError naming `field`: a socket refuses one outside
    that range with a traceback, and a server given one exits with no word of why."""
    try:
        port = int(str(value))
    except ValueError:
        raise ConfigError(f"{field}: {value!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{field}: a TCP port is 1-65535, got {port}")
    return port


def port_option(field: str) -> Callable[[str], int]:
    """`check_port` as an argparse `type=`: the option's error is the one `config error:` line."""

    def port(text: str) -> int:
        try:
            return check_port(text, field)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{field}: ")) from None

    return port


def whole_number(text: str, minimum: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {n}")
    return n


def int_option(minimum: int) -> Callable[[str], int]:
    """An argparse `type=` for a whole number of at least `minimum` (a count, a size): argparse
    then refuses `--steps 0` or `--rows abc` in the one `config error:` line, naming the option."""
    return lambda text: whole_number(text, minimum)


def int_list_option(minimum: int) -> Callable[[str], list[int]]:
    """`int_option` for a comma-separated list (`--widths 768,1600`); empty items are ignored."""

    def numbers(text: str) -> list[int]:
        found = [whole_number(item.strip(), minimum) for item in text.split(",") if item.strip()]
        if not found:
            raise argparse.ArgumentTypeError(f"no number in {text!r}")
        return found

    return numbers


def number_option(minimum: float) -> Callable[[str], float]:
    """An argparse `type=` for a finite number of at least `minimum` (seconds, say)."""

    def number(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(x) and x >= minimum):
            raise argparse.ArgumentTypeError(f"must be a finite number >= {minimum:g}, got {text}")
        return x

    return number


def parse(made: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Options and overrides in any order (`a=1 -m b=2`); a usage error exits USAGE (argparse's)."""
    return made.parse_intermixed_args(None if argv is None else list(argv))


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def refusal_line(err: BaseException) -> str:
    """A refusal of the command line or the config (one of CONFIG_ERRORS) as its one line: Hydra's and
    OmegaConf's composition errors name the key (`seed: 'abc' is not an integer`)."""
    if isinstance(err, ConfigError):
        return f"config error: {err}"
    return f"config error: {compose_error_line(err)}"  # type: ignore[arg-type]


def config_error(err: BaseException) -> int:
    """Print `config error: <key>: ...` (one line) and give USAGE."""
    print(f"config error: {one_line(err)}", file=sys.stderr)
    return USAGE


def failed(message: str) -> int:
    """Print `error: <message>` (one line) and give FAILED."""
    print(f"error: {message}", file=sys.stderr)
    return FAILED


def run(body: Callable[[], int | None], failures: tuple[type[BaseException], ...] = ()) -> int:
    """`body()`'s exit code (None: OK), a config error -> USAGE, one of `failures` -> FAILED, each on one line."""
    try:
        code = body()
    except CONFIG_ERRORS as err:
        return config_error(err)
    except failures as err:
        return failed(one_line(err))
    except SystemExit as exit_:  # a one-line refusal from deeper down
        return exit_status(exit_)
    return OK if code is None else code


def renamed_option(argv: Sequence[str] | None, old: str, new: str, why: str) -> list[str]:
    """`argv` with the old spelling of an option (`old` or `old=value`) replaced by `new`, and a
    one-line hint on stderr when it was used."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = []
    for arg in args:
        if arg == old or arg.startswith(old + "="):
            print(f"hint: {old} is now {new} ({why})", file=sys.stderr)
            arg = new + arg[len(old) :]
        out.append(arg)
    return out


def exit_status(exit_: SystemExit) -> int:
    """The status of a SystemExit: a one-line message (`raise SystemExit("config error: ...")`, which
    Python would end with 1) is printed as Python prints it and gets USAGE for a config error,
    FAILED for any other; a number stays as it is."""
    code = exit_.code
    if code is None or isinstance(code, int):
        return code or OK
    print(code, file=sys.stderr)
    return USAGE if str(code).startswith("config error:") else FAILED


# Which command a process belongs to: set by the first `python -m src.train` of a process tree and
# inherited by every job process it starts (pool workers, torchrun ranks, SLURM tasks), so a run
# records the command that trained it and two copies of one sweep tell their jobs apart.
COMMAND_ENV = "NORMSWEEP_COMMAND"

# A file the sweep that submitted a SLURM job writes when it is stopped (Ctrl+C, SIGTERM) just before it
# cancels its jobs (src/launch/slurm_launcher.py): the SIGTERM of that scancel is then no pre-emption,
# and the job must not requeue itself (src/training/preemption.py). The sweep names the file in the
# environment sbatch passes on. Here, on the ground floor, so the launcher names it without torch.
CANCELLED_FILE_ENV = "NORMSWEEP_SWEEP_CANCELLED_FILE"


def mark_command(new: bool = False) -> str:
    """This process tree's command id (host, pid and start time of its first process): set once, or
    afresh (`new`: a command line started here, even by a process that had one)."""
    import socket
    import time

    made = f"{socket.gethostname()}:{os.getpid()}:{time.time():.3f}"
    if new:
        os.environ[COMMAND_ENV] = made
    return os.environ.setdefault(COMMAND_ENV, made)


def in_multirun() -> bool:
    """This process runs a job of a Hydra multirun (`-m`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def hydra_status(command: Callable[[], object], task_started: Callable[[], bool], multirun: bool) -> int:
    """Run a Hydra command line (`python -m src.train`) under the exit codes above.

    Hydra prints its own refusal of an override or of the composition and exits 1; in a single run that
    happens before the task function starts, so it is a config error (USAGE). In a sweep its launcher
    may run the jobs in other processes, so a 1 there stays a failure. Our refusals inside Hydra (its
    callbacks and sweeper, the task) are one-line SystemExit messages and get their status by prefix.
    """
    try:
        command()
    except SystemExit as exit_:
        if exit_.code == FAILED and not task_started() and not multirun:
            return USAGE
        return exit_status(exit_)
    return OK
