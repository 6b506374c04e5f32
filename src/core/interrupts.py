"""Ctrl+C during a run, pressed once or many times: the run is closed once, with its one line.

Torch-free: the command line marks itself (`exit_quietly_after_ctrl_c`) before it imports torch.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


def signal_name(number: int) -> str:
    """`SIGKILL` for 9: a process that a signal ended, in words (a number no name has: `signal 64`)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class OneCtrlC:
    """Ctrl+C during a run: the first one stops it (KeyboardInterrupt, as Python's own handler), the
    ones after it are noted and ignored until the run is closed. A second Ctrl+C pressed while the
    first one's clean-up writes the run's end (or a terminal's process group interrupted twice) cut
    that write short: a 60-line traceback, and the run left RUNNING. Lightning ignores SIGINT once it
    has caught the first, but only from there: the interrupt unwinds through the loop first, and one
    outside a fit never reaches it. Installed on the main thread only (signals are delivered there)."""

    command_line = False  # this process is `python -m src.train`, not a notebook (`exit_quietly_after_ctrl_c`)

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.pressed = 0

    @classmethod
    def install(cls) -> OneCtrlC | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:  # ignored, or a handler of the user's: left alone
            return None
        guard = cls(previous)
        signal.signal(signal.SIGINT, guard._handle)
        return guard

    def _handle(self, signum: int, frame: Any) -> None:
        self.pressed += 1
        if self.pressed == 1:
            raise KeyboardInterrupt

    def restore(self) -> None:
        """Python's own handler again (Lightning may have set SIG_IGN meanwhile): this process's
        next run, in a sequential sweep or a notebook, is interrupted as the first was. A command
        line whose run was interrupted is ending: it ignores Ctrl+C from here on, since one more
        would only cut its exit short into a traceback (`exit_quietly_after_ctrl_c`)."""
        ending = self.pressed and OneCtrlC.command_line
        signal.signal(signal.SIGINT, signal.SIG_IGN if ending else self.previous)


def exit_quietly_after_ctrl_c() -> None:
    """This process is a command line: once a run of it was interrupted, it ends without another."""
    OneCtrlC.command_line = True
