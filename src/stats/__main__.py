"""`python -m src.stats [key=value ...]`: the sequential design's operating characteristics (error
rates, seeds and power, by simulation) under the sweeper's settings, as docs/sequential.md quotes them.

The overrides are those of `python -m src.train`, e.g. `hydra.sweeper.max_seeds=20`, applied to the
sequential sweeper's config (`hydra/sweeper=sequential`).
"""

from __future__ import annotations

import sys

from src.core import cli
from src.core.paths import compose
from src.stats.sequential import Design, tables
from src.stats.settings import check_sweeper


def main(argv: list[str] | None = None) -> int:
    args = cli.parse(cli.parser("python -m src.stats", __doc__), argv)

    def simulate() -> int:
        sweeper = compose(["hydra/sweeper=sequential", *args.overrides], with_hydra=True).hydra.sweeper
        check_sweeper(sweeper)  # as the sweeper checks them: one line naming the key
        print(tables(Design.of(sweeper)))
        return cli.OK

    return cli.run(simulate)


if __name__ == "__main__":
    sys.exit(main())
