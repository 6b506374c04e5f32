"""Prepare a corpus's token cache and print its size: `python -m src.data [--source shakespeare]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .cache import SPLITS, read_meta
from .sources import DATA_SOURCES, build_source

# The project root is the folder that holds the `src` package.
DEFAULT_CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "data"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m src.data", description=__doc__)
    parser.add_argument("--source", default="shakespeare", choices=sorted(set(DATA_SOURCES) - {"fineweb"}),
                        help="fineweb has its own command: python -m src.data.fineweb")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="default: %(default)s")
    parser.add_argument("--paths", nargs="+", help="glob(s) of .txt / .jsonl files (source text_files)")
    parser.add_argument("--val-fraction", type=float, default=0.05, help="source text_files")
    parser.add_argument("--test-fraction", type=float, default=0.05, help="source text_files")
    args = parser.parse_args(argv)

    source = build_source(
        {
            "source": args.source,
            "paths": args.paths,
            "val_fraction": args.val_fraction,
            "test_fraction": args.test_fraction,
        }
    )
    folder = source.prepare(args.cache_dir)
    splits = read_meta(folder)["splits"]
    total = sum(splits[split]["tokens"] for split in SPLITS)
    for split in SPLITS:
        entry = splits[split]
        print(
            f"{split:5s} {entry['tokens']:>12,} tokens  {entry['tokens'] / total:6.1%}  "
            f"{entry['documents']:>6,} documents"
        )
    print(f"cache: {folder}")


if __name__ == "__main__":
    main()
