"""Stop a team server's PostgreSQL and `mlflow server` when the process that started them dies.

    python -m src.tracking.server_guard      # started by src/tracking/team_server.py, fed on stdin

A SIGKILLed team server (`kill -9`, the OOM killer) left both servers serving, adopted by init,
holding the ports and the folder. Neither can be tied to its parent's life by the kernel alone:
`pg_ctl` daemonizes the postmaster, `mlflow server` starts uvicorn as a child of its own, and
Linux's parent-death signal fires when the parent *thread* ends (a server restarted from a worker
thread would die with it) and is not inherited by grandchildren. So the team server starts this
guard in a session of its own (a Ctrl+C in the terminal does not reach it) and tells it, one line
each on the guard's stdin, what to stop:

    group <pgid>       a process group (`mlflow server` and its uvicorn)
    postgres <pgdata>  the postmaster named by <pgdata>/postmaster.pid (read when it is time to stop)
    forget <line>      the team server stopped it itself

When the stdin closes (the team server ended, however it ended: the kernel closes its pipes), the
guard stops what is still registered and exits (src/core/process_group.py: how, and the grace).
Stdlib only, started in well under a second.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

from src.core.process_group import GRACE_S, alive, group_members, signal_group, wait_until


def postmaster_pid(pgdata: Path) -> int | None:
    """The live postmaster of `pgdata` (its postmaster.pid's first line), or None: no file, or a stale
    one whose pid is gone or now another process."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        # Its command line names the folder (pg_ctl starts `postgres -D <pgdata>`): a reused pid is not it.
        if alive(pid) and str(pgdata).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    return None


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop(groups: list[int], pgdatas: list[Path], grace_s: float = GRACE_S) -> None:
    """Stop these process groups (SIGTERM) and postmasters (SIGINT: PostgreSQL's fast shutdown), then,
    for whatever is still alive after `grace_s`, SIGKILL and SIGQUIT (PostgreSQL's immediate shutdown)."""
    postmasters = [pid for pid in map(postmaster_pid, pgdatas) if pid is not None]
    for pgid in groups:
        signal_group(pgid, signal.SIGTERM)
    for pid in postmasters:
        _signal(pid, signal.SIGINT)

    def still_running() -> tuple[list[int], list[int]]:
        return [g for g in groups if group_members(g)], [p for p in postmasters if alive(p)]

    wait_until(lambda: not any(still_running()), grace_s)
    left_groups, left_postmasters = still_running()
    for pgid in left_groups:
        signal_group(pgid, signal.SIGKILL)
    for pid in left_postmasters:
        _signal(pid, signal.SIGQUIT)


def guard(lines: Iterable[str]) -> None:
    """Read registrations until `lines` end (the team server's pipe closed), then stop what is registered."""
    registered: list[str] = []
    for line in lines:
        line = line.strip()
        if line.startswith("forget "):
            with contextlib.suppress(ValueError):
                registered.remove(line.removeprefix("forget "))
        elif line:
            registered.append(line)
    groups = [int(r.split(" ", 1)[1]) for r in registered if r.startswith("group ")]
    pgdatas = [Path(r.split(" ", 1)[1]) for r in registered if r.startswith("postgres ")]
    stop(groups, pgdatas)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the team server's end stops the servers
    guard(sys.stdin)
