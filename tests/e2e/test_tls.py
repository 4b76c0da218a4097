"""TLS on the client port: server certificates, client verification, handshake_first.

Certificates are generated per session (tests/support/tls.py). Reference
behaviour observed on nats-server 2.15.1:
- INFO is sent in plain text first with ``tls_required: true`` (and
  ``tls_verify: true`` under verify), then the client upgrades;
- a plain-text client that answers INFO with CONNECT is disconnected at once
  with NO bytes at all (no -ERR, no TLS alert);
- with ``handshake_first`` no plain INFO is sent: the server waits for a TLS
  ClientHello and drops a plain-text client, again without a byte.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

import pytest
from nats.errors import Error as NatsError

from tests.conftest import Connect, MakeServer
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess
from tests.support.tls import Pki, make_pki

# nats-py surfaces a failed handshake as one of these depending on timing.
HANDSHAKE_FAILURES = (ssl.SSLError, NatsError, OSError, TimeoutError)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """One CA with server and client certificates for the whole run."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_flags(pki: Pki, *, verify: bool = False) -> list[str]:
    """Command-line TLS flags, the nats-server way."""
    flags = ["--tlscert", str(pki.server_cert), "--tlskey", str(pki.server_key)]
    if verify:
        return ["--tlsverify", *flags, "--tlscacert", str(pki.ca_cert)]
    return ["--tls", *flags]


def tls_config(pki: Pki, **extra: str) -> str:
    """The same TLS settings as a config-file block."""
    lines = [f'cert_file: "{pki.server_cert}"', f'key_file: "{pki.server_key}"']
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "tls {\n  " + "\n  ".join(lines) + "\n}\n"


async def round_trip(nc) -> None:
    """Prove the TLS session carries traffic both ways."""
    sub = await nc.subscribe("tls.x")
    await nc.publish("tls.x", b"secret payload")
    msg = await sub.next_msg(timeout=5)
    assert msg.data == b"secret payload"


StartTls = Callable[[MakeServer, Pki], ServerProcess]
TLS_SERVERS: dict[str, StartTls] = {
    "flags": lambda make, pki: make(*tls_flags(pki)),
    "config": lambda make, pki: make(config=tls_config(pki)),
}
VERIFY_SERVERS: dict[str, StartTls] = {
    "flags": lambda make, pki: make(*tls_flags(pki, verify=True)),
    "config": lambda make, pki: make(
        config=tls_config(pki, ca_file=f'"{pki.ca_cert}"', verify="true")
    ),
}


@pytest.mark.parametrize("how", list(TLS_SERVERS))
async def test_tls_server(make_server: MakeServer, connect: Connect, pki: Pki, how: str) -> None:
    """A client trusting the CA connects over TLS; INFO advertises tls_required."""
    server = TLS_SERVERS[how](make_server, pki)
    async with await RawClient.connect(server.host, server.port) as raw:
        assert raw.info["tls_required"] is True
        # The reference omits tls_verify when off (Go omitempty); false is equivalent.
        assert not raw.info.get("tls_verify", False)
    nc = await connect(server.tls_url, tls=pki.client_context())
    await round_trip(nc)
    # The client's close (TLS close_notify, then EOF) must be answered by the
    # server closing too; otherwise asyncio waits out its 30s SSL shutdown timeout.
    await asyncio.wait_for(nc.close(), 2)


async def test_tls_server_rejects_untrusting_client(
    make_server: MakeServer, connect: Connect, pki: Pki
) -> None:
    """The client side verifies the server: an unknown CA fails the handshake."""
    server = make_server(*tls_flags(pki))
    with pytest.raises(HANDSHAKE_FAILURES):
        await connect(server.tls_url, tls=ssl.create_default_context())


@pytest.mark.parametrize("how", list(VERIFY_SERVERS))
async def test_tls_verify_requires_client_cert(
    make_server: MakeServer, connect: Connect, pki: Pki, how: str
) -> None:
    """With verify, a client certificate signed by the CA is required."""
    server = VERIFY_SERVERS[how](make_server, pki)
    async with await RawClient.connect(server.host, server.port) as raw:
        assert raw.info["tls_required"] is True
        assert raw.info["tls_verify"] is True
    nc = await connect(server.tls_url, tls=pki.client_context(with_cert=True))
    await round_trip(nc)
    with pytest.raises(HANDSHAKE_FAILURES):
        await connect(server.tls_url, tls=pki.client_context(with_cert=False))


async def test_tls_handshake_first(make_server: MakeServer, connect: Connect, pki: Pki) -> None:
    """handshake_first: TLS before any INFO; nats-py needs tls_handshake_first=True."""
    server = make_server(config=tls_config(pki, handshake_first="true"))
    nc = await connect(server.tls_url, tls=pki.client_context(), tls_handshake_first=True)
    await round_trip(nc)
    # A client waiting for a plain INFO first gets nothing and fails.
    with pytest.raises(HANDSHAKE_FAILURES):
        await connect(server.tls_url, tls=pki.client_context(), connect_timeout=0.5)


async def test_plaintext_client_against_tls_server(make_server: MakeServer, pki: Pki) -> None:
    """Plain-text CONNECT to a TLS-only server: closed at once, without a byte."""
    server = make_server(*tls_flags(pki))
    raw = await RawClient.connect(server.host, server.port)
    try:
        assert raw.info["tls_required"] is True
        await raw.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert await raw.read_to_eof(timeout=5) == b""
    finally:
        await raw.close()


async def test_plaintext_client_against_handshake_first(make_server: MakeServer, pki: Pki) -> None:
    """handshake_first: no plain INFO at all; plain-text bytes get a silent close."""
    server = make_server(config=tls_config(pki, handshake_first="true"))
    raw = await RawClient.connect(server.host, server.port, read_info=False)
    try:
        await raw.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert await raw.read_to_eof(timeout=5) == b""
    finally:
        await raw.close()
