"""One worker of a one-node sweep job (src/launch/node_launcher.py): `torchrun ... -m src.launch.node_job <folder>`.

Every worker runs the job; rank 0 leaves its result in the folder for the launcher, written whole
or not at all. A worker that stops for a signal (the job pre-empted) leaves none.
"""

from __future__ import annotations

import os
from pathlib import Path

import cloudpickle

from src.core import cli
from src.core.atomic_io import atomic_write
from src.launch.node_launcher import JOB_FILE, RESULT_FILE


def run_job(folder: Path) -> None:
    with open(folder / JOB_FILE, "rb") as f:
        launcher, overrides, num, state = cloudpickle.load(f)
    result = launcher.run_one(overrides, num, state)
    if int(os.environ.get("RANK", "0")) == 0:
        atomic_write(folder / RESULT_FILE, cloudpickle.dumps(result))


def main(argv: list[str] | None = None) -> None:
    """The worker's command line: the launcher passes the job's folder; a person reading `--help` gets
    the usage rather than a traceback for a folder named `--help`."""
    parser = cli.parser("python -m src.launch.node_job", __doc__.split("\n\n")[0], overrides=None)
    parser.add_argument("folder", type=Path, help=f"the job's folder, holding the {JOB_FILE} the node launcher wrote")
    folder: Path = parser.parse_args(argv).folder
    if not (folder / JOB_FILE).is_file():  # a worker started by hand, or a folder already cleaned up
        parser.error(f"{folder}: no {JOB_FILE} there (the node launcher writes it before starting the workers)")
    run_job(folder)


if __name__ == "__main__":
    main()
