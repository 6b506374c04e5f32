"""Ctrl+C during a run, pressed once or many times: the run is closed once, with its one line.

Torch-free: the command line marks itself (`exit_quietly_after_ctrl_c`) before it imports torch.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any, ClassVar


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
    live: ClassVar[OneCtrlC | None] = None  # the guard installed now, read by `whole_on_ctrl_c`

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.pressed = 0
        self.held = 0  # calls in progress that a first Ctrl+C must not cut in two (`whole_on_ctrl_c`)
        self.deferred = False  # a first Ctrl+C came during one: raised as the last of them returns

    @classmethod
    def install(cls) -> OneCtrlC | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:  # ignored, or a handler of the user's: left alone
            return None
        guard = cls(previous)
        signal.signal(signal.SIGINT, guard._handle)
        OneCtrlC.live = guard
        return guard

    def _handle(self, signum: int, frame: Any) -> None:
        self.pressed += 1
        if self.pressed == 1:
            if self.held:
                self.deferred = True
                return
            raise KeyboardInterrupt

    def restore(self) -> None:
        """Python's own handler again (Lightning may have set SIG_IGN meanwhile): this process's
        next run, in a sequential sweep or a notebook, is interrupted as the first was. A command
        line whose run was interrupted is ending: it ignores Ctrl+C from here on, since one more
        would only cut its exit short into a traceback (`exit_quietly_after_ctrl_c`)."""
        ending = self.pressed and OneCtrlC.command_line
        signal.signal(signal.SIGINT, signal.SIG_IGN if ending else self.previous)
        if OneCtrlC.live is self:
            OneCtrlC.live = None


@contextlib.contextmanager
def whole_on_ctrl_c() -> Iterator[None]:
    """A call that Ctrl+C must not cut in two: a first Ctrl+C during it is raised as it returns.
    A store statement interrupted half-way left its SQLite connection holding the file's lock, so the
    run's close a moment later found the store locked by its own process, and the run was said to be
    unrecorded. Only on the main thread while a run's guard is installed; elsewhere a plain call."""
    guard = OneCtrlC.live
    if guard is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    guard.held += 1
    try:
        yield
    finally:
        guard.held -= 1
        if not guard.held and guard.deferred:
            guard.deferred = False
            raise KeyboardInterrupt


def exit_quietly_after_ctrl_c() -> None:
    """This process is a command line: once a run of it was interrupted, it ends without another."""
    OneCtrlC.command_line = True
