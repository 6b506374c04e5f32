"""One worker of a one-node sweep job (src/launch/node_launcher.py): `torchrun ... -m src.launch.node_job <folder>`.

Every worker runs the job; rank 0 leaves its result in the folder for the launcher, written whole
or not at all. A worker that stops for a signal (the job pre-empted) leaves none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import cloudpickle

from src.core.atomic_io import atomic_write
from src.launch.node_launcher import JOB_FILE, RESULT_FILE


def main(folder: Path) -> None:
    with open(folder / JOB_FILE, "rb") as f:
        launcher, overrides, num, state = cloudpickle.load(f)
    result = launcher.run_one(overrides, num, state)
    if int(os.environ.get("RANK", "0")) == 0:
        atomic_write(folder / RESULT_FILE, cloudpickle.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
