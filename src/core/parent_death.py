"""A child that dies with the process that started it, even when that one is SIGKILLed.

`kill -9` of a sweep runs none of its code: a child it started (torchrun, and through it a job's
ranks) is re-parented to PID 1 and trains on, recording a run the dead sweep never hears of. Linux's
parent-death signal (`prctl(PR_SET_PDEATHSIG)`), set in the child between fork and exec, has the
kernel send it a signal when its parent dies: SIGTERM, which torchrun passes on to its ranks (they
checkpoint and record the run pre-empted: the re-run resumes it). Elsewhere it is not set, and the
child outlives a SIGKILLed parent as before.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def terminated_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen` (None where the OS has no parent-death signal). Popen
    must be called from the thread that lives as long as the child should: Linux sends the signal
    when the parent *thread* ends."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:  # in the child, after fork, before exec: nothing here may allocate much or lock
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return arm
