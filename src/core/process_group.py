"""Stopping a server we started in its own session (`start_new_session=True`): the whole process
group, since a server's workers (uvicorn's, gunicorn's) can outlive their leader."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

GRACE_S = 30.0  # a loaded machine can take this long to stop a server that shuts down cleanly


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = GRACE_S) -> None:
    """Send `sig` to `proc`'s group, wait `grace_s` for its leader, then SIGKILL the group and reap it.
    A group already gone is stopped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
