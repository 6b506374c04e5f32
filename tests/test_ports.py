"""The port a server we start is given: free now, and outside the range outgoing connections take theirs."""

from __future__ import annotations

import socket

from src.core.ports import LOWEST, _binds, ephemeral_low, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_takes_a_listener() -> None:
    low = ephemeral_low()
    assert LOWEST < low <= 65_535  # this machine's range, read from the kernel
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST <= port < low for port in ports), ports
    with socket.socket() as server:
        port = ports.pop()
        server.bind(("127.0.0.1", port))
        server.listen()
        assert not _binds(port)  # held: a later pick passes it over
        client = socket.create_connection(("127.0.0.1", port))
        assert client.getsockname()[1] >= low  # the connection's own port: the range the pick avoids
        client.close()
