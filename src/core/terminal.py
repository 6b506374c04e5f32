"""What fits a terminal: every line normsweep prints at most WIDTH characters.

A sentence longer than that is wrapped at word boundaries, its continuation lines indented under
its first (a short command in backticks is kept on one line, to be copied whole; a word longer
than a line, such as an address, stands alone on its line); tables split
their columns instead (src.core.tables.text_table). The full text lives in report.md and report.html.
"""

from __future__ import annotations

import logging
import re
import sys
import textwrap
from collections.abc import Iterable
from typing import TextIO

WIDTH = 120  # a terminal's line, as the terminal report and the sweep's own lines keep to
HANG = 4  # how much further a wrapped sentence's continuation lines are indented (an item of a list: 2)


def wrap(line: str, width: int = WIDTH) -> list[str]:
    """One printed line as lines of at most `width` characters (continuation lines indented by HANG
    more than the first)."""
    if len(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip())]
    lines = textwrap.wrap(
        _glued(line.strip(), width // 2), width=width, initial_indent=lead, subsequent_indent=lead + " " * HANG,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip
    return [x.replace(GLUE, " ") for x in lines] or [line]


GLUE = "\0"  # a space inside a short backticked command, kept from the wrapping until it is done


def _glued(text: str, longest: int) -> str:
    """`text` with the spaces of each backticked span of at most `longest` characters glued."""
    return re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", GLUE) if len(m.group(0)) <= longest else m.group(0), text)


def fit(lines: Iterable[str], width: int = WIDTH) -> list[str]:
    """Every line of `lines` (each may hold newlines) wrapped to `width`."""
    return [short for line in lines for part in line.split("\n") for short in wrap(part, width)]


def say(text: str, stream: TextIO | None = None) -> None:
    """Print one of normsweep's messages (`[normsweep] ...`), wrapped to WIDTH: every line it prints
    goes through here (tests/test_terminal_lines.py holds the source to it)."""
    print(*fit([text]), sep="\n", file=stream or sys.stdout, flush=True)


class WrappedFormatter(logging.Formatter):
    """A log line wrapped to WIDTH (Hydra's own lines: conf/hydra/hydra_logging/normsweep.yaml)."""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(fit([super().format(record)]))
