"""The connection's TLS layer, driven by an in-memory client: no sockets, no event loop."""

from __future__ import annotations

import contextlib
import ssl

import pytest

from ingest.server.settings import TLSConfig
from ingest.server.tls import TLSLayer, make_server_context
from tests.support.tls import Pki


def connected(pki: Pki) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO, TLSLayer]:
    ctx = make_server_context(
        TLSConfig(cert_file=str(pki.server_cert), key_file=str(pki.server_key))
    )
    server = TLSLayer(ctx)
    to_client, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = pki.client_context().wrap_bio(to_client, from_client, server_hostname="127.0.0.1")
    for _ in range(4):
        with contextlib.suppress(ssl.SSLWantReadError):
            client.do_handshake()
        server.receive(from_client.read())
        to_client.write(server.outgoing())
    client.do_handshake()
    return client, to_client, from_client, server


def test_handshake_then_both_directions(pki: Pki) -> None:
    client, to_client, from_client, server = connected(pki)
    assert server.established
    client.write(b"PING\r\n")
    assert server.receive(from_client.read()) == b"PING\r\n"
    to_client.write(server.encrypt(b"PONG\r\n"))
    assert client.read() == b"PONG\r\n"


def test_close_notify_is_seen_and_answered(pki: Pki) -> None:
    """A client's TLS close completes only once the server sends close_notify back."""
    client, to_client, from_client, server = connected(pki)
    with pytest.raises(ssl.SSLWantReadError):
        client.unwrap()
    assert server.receive(from_client.read()) == b""
    assert server.peer_closed
    to_client.write(server.shutdown())
    client.unwrap()  # raises if the server's close_notify were missing


def test_plaintext_is_a_handshake_error(pki: Pki) -> None:
    _, _, _, server = connected(pki)
    fresh = TLSLayer(server._obj.context)
    with pytest.raises(ssl.SSLError):
        fresh.receive(b'CONNECT {"verbose":false}\r\nPING\r\n')
