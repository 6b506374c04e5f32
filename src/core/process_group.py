"""Stopping a process group we started in its own session (`start_new_session=True`): every member,
since a server's workers (uvicorn's, gunicorn's) can outlive their leader. The one way the project
stops one (src/tracking/team_server.py, its guard src/tracking/server_guard.py, the UI's tests), with
one grace. Stdlib only: the guard starts in well under a second."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# How long a clean stop may take before the hard signal: a server on a loaded machine stopping on
# SIGTERM (uvicorn waits for open connections), PostgreSQL's fast shutdown.
GRACE_S = 10.0


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to group `pgid`; a group already gone (or no longer ours) is left as it is."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stat_fields(pid: int | str) -> list[str]:
    """/proc/<pid>/stat after the command name: `[state, ppid, pgrp, ...]` (OSError when it is gone).
    The name may hold spaces or parentheses, so the fields start after its last `)`."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def alive(pid: int) -> bool:
    """The process runs (neither gone nor a zombie waiting to be reaped)."""
    try:
        return stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def group_members(pgid: int) -> list[int]:
    """The live processes of group `pgid` (zombies left to a parent that does not reap them excluded);
    none where there is no /proc to read (the leader's own exit is then what is waited for)."""
    members = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat_fields(entry)
                if fields[0] != "Z" and int(fields[2]) == pgid:
                    members.append(int(entry))
    return members


def wait_until(done: Callable[[], bool], grace_s: float = GRACE_S) -> bool:
    """Poll `done` for up to `grace_s`; whether it came true."""
    deadline = time.monotonic() + grace_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = GRACE_S) -> None:
    """Send `sig` to `proc`'s group, wait `grace_s` for every member to end, then SIGKILL what is left and
    reap the leader. A group already gone is stopped."""
    signal_group(proc.pid, sig)
    if not wait_until(lambda: proc.poll() is not None and not group_members(proc.pid), grace_s):
        signal_group(proc.pid, signal.SIGKILL)
    proc.wait(timeout=grace_s)
