"""A free TCP port on 127.0.0.1 for a server we start: the team server's MLflow and PostgreSQL, the
local SLURM's daemons.

Not the kernel's pick (`bind(("127.0.0.1", 0))`): that port comes from the ephemeral range, from
which every outgoing connection also takes its local port, so in the seconds between the pick and
the server's own bind a client connection could take it ("address already in use": a CI run lost
the team server so, and every test that needs it). A port below that range is never handed to a
connection; one that something listens on, or that still has a closed connection on it, fails the
trial bind and is passed over.
"""

from __future__ import annotations

import socket
from pathlib import Path

from src.core.unseeded import UNSEEDED

LOWEST = 20_000  # above the ports that services commonly take (MLflow's 5000, PostgreSQL's 5432, ...)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32_768  # Linux's default, where the range cannot be read


def ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def _binds(port: int, reuse_address: bool) -> bool:
    """A trial bind of 127.0.0.1:`port` succeeds now (with SO_REUSEADDR, as a server binds, or without)."""
    with socket.socket() as s:
        if reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def is_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port`, and no closed connection holds it: a server can bind it now."""
    return _binds(port, reuse_address=False)


def listens(port: int) -> bool:
    """Something listens on 127.0.0.1:`port`, so a server cannot start there. A closed connection
    left in TIME_WAIT does not count: servers bind with SO_REUSEADDR (uvicorn's and PostgreSQL's do),
    so the port of a server just stopped is theirs again at once."""
    return not _binds(port, reuse_address=True)


def free_port() -> int:
    """A port below the ephemeral range that nothing holds now (the kernel's pick where none is)."""
    candidates = range(LOWEST, ephemeral_low())
    for port in UNSEEDED.sample(candidates, k=min(len(candidates), 200)):
        if is_free(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
