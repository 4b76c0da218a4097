"""An account's `max_leafnodes` on accepted leafnode connections, the reference and jetlake
alike: a leaf past the limit is refused with the reference's -ERR."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.cluster import free_port
from tests.support.poll import poll
from tests.support.servers import ServerProcess, start_server

TIMEOUT = 5.0
REFUSED = b"-ERR 'maximum account active connections exceeded'\r\n"


def leaf_connect(port: int, name: str) -> tuple[socket.socket, bytes]:
    """A leaf's CONNECT as user lim; the hub's first answer to the PING after it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    lines = sock.makefile("rb")
    assert lines.readline().startswith(b"INFO ")
    connect = f'{{"user":"lim","pass":"lim","name":"{name}","server_id":"{name}"}}'
    sock.sendall(b"CONNECT " + connect.encode() + b"\r\nPING\r\n")
    line = lines.readline()
    while line.startswith((b"INFO ", b"LS+ ", b"PING")):  # the hub's own, in any order
        line = lines.readline()
    return sock, line


def test_leafnodes_past_the_account_limit_are_refused(server_kind: str, tmp_path: Path) -> None:
    port = free_port()
    config = f"""
leafnodes {{ listen: 127.0.0.1:{port} }}
accounts {{
  LIM {{ users [ {{user: lim, password: lim}} ], limits {{ max_leafnodes: 1 }} }}
}}
"""
    server: ServerProcess = start_server(server_kind, config=config, tmp_path=tmp_path)
    try:
        first, answer = leaf_connect(port, "LEAF1")
        assert answer == b"PONG\r\n"
        second, answer = leaf_connect(port, "LEAF2")
        assert answer == REFUSED
        assert second.recv(100) == b""  # and closed
        second.close()
        first.close()
        # The first one's place is free once it is gone.

        def admitted() -> bool:
            third, answer = leaf_connect(port, "LEAF3")
            third.close()
            return answer == b"PONG\r\n"

        poll(admitted, "a third leafnode admitted in the first one's place", TIMEOUT)
    finally:
        server.kill()
