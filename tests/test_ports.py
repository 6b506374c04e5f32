"""The port a server we start is given: free now, and outside the range outgoing connections take theirs."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

from helpers import REPO, cli_env

from src.core.ports import LOWEST, ephemeral_low, free_port, is_free, listens


def test_a_free_port_is_below_the_ephemeral_range_and_takes_a_listener() -> None:
    low = ephemeral_low()
    assert LOWEST < low <= 65_535  # this machine's range, read from the kernel
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST <= port < low for port in ports), ports
    with socket.socket() as server:
        port = ports.pop()
        server.bind(("127.0.0.1", port))
        server.listen()
        assert not is_free(port) and listens(port)  # held: a later pick passes it over
        client = socket.create_connection(("127.0.0.1", port))
        assert client.getsockname()[1] >= low  # the connection's own port: the range the pick avoids
        client.close()


def test_processes_seeded_alike_still_pick_different_ports() -> None:
    """Every training seeds the global `random`: two test workers that had each trained with seed 0 both
    started a server on 26311 (the first port drawn after `random.seed(0)`), and a test that expected a
    refusal from its own server got an answer from the other's."""
    picks = set()
    for _ in range(3):
        random.seed(0)  # what Lightning's seed_everything(0) does before each of them
        picks.add(free_port())
    assert len(picks) > 1, picks  # one pick three times: it came from the seeded state


def test_a_stopped_server_s_port_is_not_taken_though_a_closed_connection_lingers() -> None:
    """A team server stopped and started again on its --port was refused as taken: the server side of
    its last connection lingers in TIME_WAIT, which fails a plain trial bind but not a server's."""
    port = free_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and PostgreSQL do
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server closes first, as an HTTP server does: its side goes to TIME_WAIT
        client.recv(1)
        client.close()
    assert not listens(port)  # a server may start here again at once
    assert not is_free(port)  # but a fresh pick passes it over (the lingering connection)


def test_a_team_server_on_a_taken_port_is_refused_naming_the_option(tmp_path: Path) -> None:
    """Before PostgreSQL or `mlflow server` starts: one line naming the option (was: `mlflow server
    exited (0)`, the reason only in its log)."""
    state = tmp_path / "team"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "src.tracking.team_server", "--port", str(port), "--pg-port", str(free_port()), "--dir", str(state)],
            cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --port {port}: something already listens on 127.0.0.1:{port} (another server, or a team server on "
        "another --dir): choose another --port"
    ], done.stderr
    assert not (state / "pgdata").exists() and not (state / "mlflow-server.log").exists()  # nothing was started
