"""The benchmarks' torch-free plumbing: report files, table cells, list options, and glibc's malloc
thresholds. `python -m src.bench overhead` times subprocesses and must not import torch itself (its
start would count as nothing and cost seconds), so what it shares with the kernel benchmarks lives here."""

from __future__ import annotations

import argparse
import ctypes
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from src.core import cli
from src.core.paths import compose

BENCH_DIR = "bench"  # under paths.reports_dir
_malloc = {"tuned": False}  # set by keep_freed_memory, reported by machine_info (src.bench.common)


def keep_freed_memory() -> bool:
    """Make glibc keep freed buffers for reuse instead of returning them to the OS.

    By default glibc serves large allocations with fresh mmaps (or trims its heap on free), so a
    kernel's output buffer is often new memory whose first touch costs one page fault per 4 KiB:
    on this class of VM that alone can exceed the kernel's run time, and whether it happens
    depends on the allocation history, not on the kernel. Raising the thresholds (as jemalloc
    or tcmalloc would, the usual advice for CPU training) makes timings reflect the kernels.
    Buffers above 32 MiB (glibc's cap) are still mapped afresh. Returns False where unavailable.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    _malloc["tuned"] = bool(
        libc.mallopt(m_mmap_threshold, 32 * 2**20) and libc.mallopt(m_trim_threshold, 2**31 - 1)
    )
    return _malloc["tuned"]


def malloc_tuned() -> bool:
    """`keep_freed_memory` ran and took effect in this process."""
    return _malloc["tuned"]


def parse_list(text: str, cast: Callable[[str], Any] = str) -> list[Any]:
    """`"768,1024"` -> `[768, 1024]` with `cast=int`; empty items are ignored."""
    return [cast(item.strip()) for item in text.split(",") if item.strip()]


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def cells(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[list[str]]:
    """Rows of dicts as text cells for `src.core.tables.markdown_table`, the one table writer."""
    return [[fmt(row.get(c)) for c in columns] for row in rows]


def default_out_dir(overrides: Sequence[str] = ()) -> Path:
    """`<paths.reports_dir>/bench` of the training config with these overrides (`paths.root_dir=...`)."""
    return Path(compose(overrides).paths.reports_dir) / BENCH_DIR


def write_report(out_dir: Path, name: str, payload: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """`<out>/<name>.json` and `<out>/<name>.md`; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(markdown + "\n")
    return json_path, md_path


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """`--out` and the key=value overrides (paths.* alone read) of a bench that times subprocesses."""
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: <paths.reports_dir>/bench)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help=cli.OVERRIDES_HELP + "; only paths.* is read (the report folder)")


def say_and_write(args: argparse.Namespace, name: str, payload: dict[str, Any], markdown: str) -> None:
    """Print the bench's table, write `<name>.{json,md}` where `add_report_options` says, and name both."""
    print(markdown)
    json_path, md_path = write_report(args.out or default_out_dir(args.overrides), name, payload, markdown)
    print(f"written: {json_path}, {md_path}")
