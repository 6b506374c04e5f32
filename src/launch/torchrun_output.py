"""torchrun's output for one node job, with a rank killed by a signal said in one line.

A `kill -9` of one rank (the OOM killer, a person) printed 47 lines: the surviving rank's gloo error
(`Connection closed by peer ... GLHF!`), torchrun's own log lines and its `ChildFailedError`
traceback and table, none of them saying plainly which rank died and why. The workers inherit
torchrun's stdout and stderr, so the node launcher reads both here: lines pass through as they come
until one of those failure lines appears; from then on they are held. When torchrun has ended,
`KilledRank.find` reads the held text for torchrun's root cause; a rank that died by a signal
becomes the launcher's one line and the held lines are dropped, anything else is printed as it was
(nothing is lost when torchrun's wording changes).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import IO, TextIO

from src.core.interrupts import signal_name

# What starts the held part: the survivors' transport errors and torchrun's report of a failed worker.
FAILURE_LINE = re.compile(
    rb"gloo/transport|Connection (closed|reset) by peer|ChildFailedError|^[EW]\d{4} [^\n]*torch/distributed/elastic/"
)
# torchrun's root cause: "Root Cause (first observed failure): ... rank : 1 (local_rank: 1) / exitcode : -9 (pid: 8981)".
ROOT_CAUSE = re.compile(r"Root Cause[^\n]*\n(?:.*\n)*?\s*rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)")


@dataclass(frozen=True)
class KilledRank:
    rank: int
    pid: int
    signal: str  # SIGKILL

    @classmethod
    def find(cls, text: str) -> KilledRank | None:
        """The rank torchrun names as the first to fail, when a signal ended it (negative exit code)."""
        found = ROOT_CAUSE.search(text)
        if found is None or int(found.group(2)) >= 0:
            return None
        return cls(int(found.group(1)), int(found.group(3)), signal_name(-int(found.group(2))))


class TorchrunOutput:
    """Pass torchrun's stdout and stderr through, holding everything from the first failure line on."""

    def __init__(self, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.held: list[tuple[TextIO, bytes]] = []
        self._holding = False
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._pump, args=(source, target), daemon=True, name=f"normsweep-torchrun-{name}")
            for source, target, name in ((stdout, sys.stdout, "out"), (stderr, sys.stderr, "err"))
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, source: IO[bytes], target: TextIO) -> None:
        # Pieces end at a newline or a carriage return: a progress bar's `\r` updates pass as they come.
        pending = b""
        while chunk := os.read(source.fileno(), 65536):
            *pieces, pending = re.split(rb"(?<=[\r\n])", pending + chunk)
            for piece in pieces:
                self._pass(piece, target)
        if pending:
            self._pass(pending, target)

    def _pass(self, piece: bytes, target: TextIO) -> None:
        with self._lock:
            self._holding = self._holding or FAILURE_LINE.search(piece) is not None
            if self._holding:
                self.held.append((target, piece))
                return
        target.write(piece.decode(errors="replace"))
        target.flush()

    def finish(self, summarize: bool = True) -> KilledRank | None:
        """After torchrun has ended: the rank a signal killed (its lines dropped), or None (lines printed).
        Not `summarize`d: every line printed (the sweep was stopped by a signal of its own)."""
        for thread in self._threads:
            thread.join()
        killed = KilledRank.find(b"".join(line for _, line in self.held).decode(errors="replace")) if summarize else None
        if killed is None:
            self._release()
        return killed

    def _release(self) -> None:
        for target, line in self.held:
            target.write(line.decode(errors="replace"))
        for target in {t for t, _ in self.held}:
            target.flush()
        self.held = []
