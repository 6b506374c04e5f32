"""`python -m src.data [source] [key=value ...]`: prepare the token cache a training job reads, and
print its size.

    python -m src.data                                          the default corpus (Shakespeare)
    python -m src.data shakespeare
    python -m src.data text_files data.paths='corpus/**/*.txt'
    python -m src.data fineweb data.num_proc=16                 stream FineWeb from the hub
    python -m src.data fineweb data.files='/data/fineweb/*.parquet'
    python -m src.data safetensors data.folder=/data/tokens      the study's own token files, copied
    python -m src.data experiment=gpt2_small_study              the data of a preset

The first argument, when it is not an override, picks the `data/` config (`data=<source>`). The rest
are the training command's overrides (`paths.cache_dir=...`, `data.val_fraction=...`): the config is
composed as `python -m src.train` composes it, so the cache lands in the folder that training
with the same overrides reads.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ..core import cli
from ..core.paths import CONF_DIR, ConfigError, compose
from .base import build_source
from .cache import read_meta


def data_configs() -> list[str]:
    """The options of the `data/` config group."""
    return sorted(path.stem for path in (CONF_DIR / "data").glob("*.yaml"))


def overrides_for(args: Sequence[str]) -> list[str]:
    """The Hydra overrides of a command line `[<source>] [overrides]`."""
    if not args or "=" in args[0]:
        return list(args)
    if args[0] not in data_configs():
        raise ConfigError(f"data: no option {args[0]!r} (conf/data/); valid choices: {', '.join(data_configs())}")
    return [f"data={args[0]}", *args[1:]]


def report(folder: Path) -> str:
    """Tokens, share and documents (and shards) per split, then the folder."""
    splits = read_meta(folder)["splits"]
    total = sum(entry["tokens"] for entry in splits.values())
    lines = []
    for split, entry in splits.items():
        line = (
            f"{split:5s} {entry['tokens']:>15,} tokens  {entry['tokens'] / max(total, 1):6.1%}  "
            f"{entry['documents']:>12,} documents"
        )
        if "shards" in entry:
            line += f"  {len(entry['shards']):>5,} shards"
        lines.append(line)
    return "\n".join([*lines, f"cache: {folder}"])


def main(argv: Sequence[str] | None = None) -> int:
    made = cli.parser("python -m src.data", __doc__, "[source] then the overrides of python -m src.train")
    args = cli.parse(made, argv)

    def prepare() -> int:
        cfg = compose(overrides_for(args.overrides))
        print(report(build_source(cfg.data).prepare(cfg.data.cache_dir)))
        return cli.OK

    return cli.run(prepare)


if __name__ == "__main__":
    sys.exit(main())
