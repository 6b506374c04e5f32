"""Which tracking servers on this machine are team servers (src/tracking/team_server.py), and how each
is started again: a file per address that a team server writes once it answers.

A client that finds its server dead, or its server's database gone, can then say what fits a team
server — look at its terminal, where the cause is named (its PostgreSQL stopped), and start it again
with its own command — rather than `mlflow server ...`. Nothing answers at a dead address, so the
record must outlive the server: a file, kept after the server ends (a later start overwrites it).
It lives in the machine's temporary folder, per user, as a port does: one machine, one record per
address. A server on another machine leaves none here, and the words stay the general ones.
Stdlib only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from src.core.atomic_io import atomic_write

MARKERS_ENV = "NORMSWEEP_TEAM_MARKERS"  # a folder instead of the default (the tests' isolation)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def markers_dir() -> Path:
    return Path(os.environ.get(MARKERS_ENV) or Path(tempfile.gettempdir()) / f"normsweep-{os.getuid()}" / "team-servers")


def _marker(uri: str) -> Path | None:
    """The record's path for a server URI on this machine (None for another host or no port)."""
    parts = urlsplit(uri)
    if parts.hostname not in LOCAL_HOSTS or parts.port is None:
        return None
    return markers_dir() / f"127.0.0.1_{parts.port}"


def publish(uri: str, start_command: str) -> None:
    """Record that a team server serves `uri`, and the command that starts it again."""
    path = _marker(uri)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (start_command + "\n").encode())


def team_server_at(uri: str) -> str | None:
    """The command that starts the team server last served at `uri`, or None where none was."""
    path = _marker(uri)
    if path is None:
        return None
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
