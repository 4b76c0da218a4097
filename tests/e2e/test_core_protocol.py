"""Differential protocol checks: the same bytes, the same observable reaction.

Each case is a byte script sent on a fresh raw connection followed by PING.
The outcome is the list of control lines the server sent back (payloads and
asynchronous INFO left out) and whether it closed the connection or answered
the PING. For a jetlake run the expected outcome is what a live reference
server does with the same bytes; for a reference run it is also compared with
the transcript pinned below (observed on nats-server 2.15.1), so a change in
the reference is noticed rather than silently followed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from tests.conftest import ServerPool
from tests.support.raw import Outcome, RawClient, info_shape

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n'
VERBOSE = b'CONNECT {"verbose":true,"pedantic":false,"headers":true,"protocol":1}\r\n'
PEDANTIC = b'CONNECT {"verbose":false,"pedantic":true,"headers":true,"protocol":1}\r\n'
NO_HEADERS = b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\n'

UNKNOWN = b"-ERR 'Unknown Protocol Operation'"
KEPT, CLOSED = False, True


@dataclass(frozen=True)
class Case:
    """A script and the reference's pinned reaction to it."""

    script: bytes
    lines: tuple[bytes, ...]
    closed: bool
    config: str | None = None

    @property
    def expected(self) -> Outcome:
        return Outcome(self.lines, self.closed)


CASES: dict[str, Case] = {
    # -- well-formed traffic -------------------------------------------------
    "pipelined": Case(
        CONNECT + b"SUB foo 1\r\nSUB foo q 2\r\nPUB foo rep 2\r\nhi\r\nPUB foo 0\r\n\r\n",
        (b"MSG foo 1 rep 2", b"MSG foo 2 rep 2", b"MSG foo 1 0", b"MSG foo 2 0"),
        KEPT,
    ),
    # Ops are case-insensitive and arguments may be separated by tabs.
    "lowercase-ops": Case(CONNECT + b"sub foo 1\r\npub foo 2\r\nhi\r\n", (b"MSG foo 1 2",), KEPT),
    "tab-separators": Case(
        CONNECT + b"SUB\tfoo\t1\r\nPUB\tfoo\t2\r\nhi\r\n", (b"MSG foo 1 2",), KEPT
    ),
    # A bare LF ends a control line too.
    "lf-only-line-end": Case(CONNECT + b"SUB foo 1\nPUB foo 2\r\nhi\r\n", (b"MSG foo 1 2",), KEPT),
    "hpub-hmsg": Case(
        CONNECT + b"SUB foo 1\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        (b"HMSG foo 1 12 14",),
        KEPT,
    ),
    "unsub-max": Case(
        CONNECT + b"SUB foo 1\r\nUNSUB 1 2\r\n" + b"PUB foo 1\r\na\r\n" * 3,
        (b"MSG foo 1 1", b"MSG foo 1 1"),
        KEPT,
    ),
    # Surprise: a second SUB reusing a live sid is ignored (not an error, not a replace).
    "duplicate-sid-ignored": Case(
        CONNECT + b"SUB foo 1\r\nSUB bar 1\r\nPUB foo 1\r\na\r\nPUB bar 1\r\nb\r\n",
        (b"MSG foo 1 1",),
        KEPT,
    ),
    "unsub-unknown-sid": Case(CONNECT + b"UNSUB 99\r\n", (), KEPT),
    "client-pong-info-ok-ignored": Case(CONNECT + b"PONG\r\nINFO {}\r\n+OK\r\n", (), KEPT),
    "connect-twice": Case(CONNECT + CONNECT, (), KEPT),
    # -- verbose / pedantic --------------------------------------------------
    "verbose": Case(
        VERBOSE + b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nUNSUB 1\r\n",
        (b"+OK", b"+OK", b"+OK", b"MSG foo 1 2", b"+OK"),
        KEPT,
    ),
    # Without CONNECT the client defaults apply: verbose on.
    "no-connect-defaults-verbose": Case(
        b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n", (b"+OK", b"+OK", b"MSG foo 1 2"), KEPT
    ),
    # Surprise: the rejected publish is still acknowledged with +OK after its -ERR.
    "verbose-pedantic-error": Case(
        b'CONNECT {"verbose":true,"pedantic":true}\r\nPUB foo.* 2\r\nhi\r\n',
        (b"+OK", b"-ERR 'Invalid Publish Subject'", b"+OK"),
        KEPT,
    ),
    "pedantic-pub-wildcard": Case(
        PEDANTIC + b"PUB foo.* 2\r\nhi\r\n", (b"-ERR 'Invalid Publish Subject'",), KEPT
    ),
    "pedantic-pub-invalid": Case(
        PEDANTIC + b"PUB foo..bar 2\r\nhi\r\n", (b"-ERR 'Invalid Publish Subject'",), KEPT
    ),
    # Surprise: without pedantic a wildcard publish is accepted and matched literally.
    "non-pedantic-pub-wildcard": Case(
        CONNECT + b"SUB foo.* 1\r\nPUB foo.* 1\r\na\r\n", (b"MSG foo.* 1 1",), KEPT
    ),
    "non-pedantic-pub-invalid": Case(CONNECT + b"PUB foo..bar 2\r\nhi\r\n", (), KEPT),
    # -- invalid subscriptions: -ERR, connection kept --------------------------
    "sub-empty-token": Case(CONNECT + b"SUB foo..bar 1\r\n", (b"-ERR 'Invalid Subject'",), KEPT),
    "sub-leading-dot": Case(CONNECT + b"SUB .foo 1\r\n", (b"-ERR 'Invalid Subject'",), KEPT),
    "sub-gt-not-last": Case(CONNECT + b"SUB foo.>.bar 1\r\n", (b"-ERR 'Invalid Subject'",), KEPT),
    # -- fatal protocol errors: -ERR then close --------------------------------
    "unknown-op": Case(CONNECT + b"FOO bar\r\n", (UNKNOWN,), CLOSED),
    "empty-line": Case(CONNECT + b"\r\n", (UNKNOWN,), CLOSED),
    "msg-from-client": Case(CONNECT + b"MSG foo 1 2\r\nhi\r\n", (UNKNOWN,), CLOSED),
    "unsub-no-sid": Case(CONNECT + b"UNSUB\r\n", (UNKNOWN,), CLOSED),
    # The payload is longer than declared: its tail is parsed as an op.
    "payload-longer-than-size": Case(CONNECT + b"PUB foo 2\r\nhello\r\n", (UNKNOWN,), CLOSED),
    "max-payload": Case(
        CONNECT + b"PUB foo 1048577\r\n", (b"-ERR 'Maximum Payload Violation'",), CLOSED
    ),
    "max-payload-configured": Case(
        CONNECT + b"PUB foo 101\r\n",
        (b"-ERR 'Maximum Payload Violation'",),
        CLOSED,
        "max_payload: 100",
    ),
    "max-payload-configured-hpub": Case(
        CONNECT + b"HPUB foo 12 101\r\n",
        (b"-ERR 'Maximum Payload Violation'",),
        CLOSED,
        "max_payload: 100",
    ),
    "at-max-payload-configured": Case(
        CONNECT + b"PUB foo 100\r\n" + b"x" * 100 + b"\r\n", (), KEPT, "max_payload: 100"
    ),
    # Note the lower case: this is the reference's exact text.
    "max-control-line": Case(
        CONNECT + b"SUB " + b"a" * 5000 + b" 1\r\n",
        (b"-ERR 'maximum control line exceeded'",),
        CLOSED,
    ),
    "max-control-line-unterminated": Case(
        CONNECT + b"PUB " + b"a" * 5000, (b"-ERR 'maximum control line exceeded'",), CLOSED
    ),
    "long-line-under-limit": Case(CONNECT + b"SUB " + b"a" * 4000 + b" 1\r\n", (), KEPT),
    "no-responders-without-headers": Case(
        b'CONNECT {"verbose":false,"no_responders":true}\r\n',
        (b"-ERR 'no responders requires headers support'",),
        CLOSED,
    ),
    # -- argument errors: the reference closes WITHOUT sending -ERR ------------
    "bad-connect-json": Case(b"CONNECT {bad\r\n", (), CLOSED),
    "connect-without-json": Case(b"CONNECT\r\n", (), CLOSED),
    "sub-missing-sid": Case(CONNECT + b"SUB foo\r\n", (), CLOSED),
    "sub-too-many-args": Case(CONNECT + b"SUB a b c d\r\n", (), CLOSED),
    "pub-missing-size": Case(CONNECT + b"PUB foo\r\n", (), CLOSED),
    "pub-bad-size": Case(CONNECT + b"PUB foo x\r\n", (), CLOSED),
    "pub-negative-size": Case(CONNECT + b"PUB foo -1\r\n", (), CLOSED),
    "pub-too-many-args": Case(CONNECT + b"PUB a b c 1\r\nx\r\n", (), CLOSED),
    "hpub-header-larger-than-total": Case(CONNECT + b"HPUB foo 20 14\r\n", (), CLOSED),
    "hpub-without-headers-negotiated": Case(
        NO_HEADERS + b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", (), CLOSED
    ),
    "err-from-client": Case(CONNECT + b"-ERR 'x'\r\n", (), CLOSED),
}


async def run_script(host: str, port: int, script: bytes) -> Outcome:
    """Fresh connection, the script, then PING: what came back and close/keep."""
    client = await RawClient.connect(host, port)
    try:
        return await client.outcome(script)
    finally:
        await client.close()


@pytest.mark.parametrize("name", list(CASES))
async def test_protocol_script(server_kind: str, server_pool: ServerPool, name: str) -> None:
    """Same bytes in, same lines out and same close/keep decision as the reference."""
    case = CASES[name]
    server = server_pool.get(server_kind, config=case.config)
    got = await run_script(server.host, server.port, case.script)
    if server_kind == "nats-server":
        assert got == case.expected, "the reference changed; re-pin this case"
    else:
        ref = server_pool.get("nats-server", config=case.config)
        expected = await run_script(ref.host, ref.port, case.script)
        assert got == expected


async def test_split_at_every_byte(server_kind: str, server_pool: ServerPool) -> None:
    """A stream delivered one byte per write parses like the same stream in one write."""
    server = server_pool.get(server_kind)
    script = (
        CONNECT + b"SUB foo.* 1\r\nPUB foo.a r 5\r\nhello\r\n"
        b"HPUB foo.b 24 26\r\nNATS/1.0\r\nA: b\r\nC: d\r\n\r\nhi\r\nUNSUB 1\r\nPUB foo.c 0\r\n\r\n"
    )
    client = await RawClient.connect(server.host, server.port)
    try:
        for i in range(len(script)):
            await client.send(script[i : i + 1])
        await client.send(b"PING\r\n")
        got = []
        while (op := await client.read_op())[0] != b"PONG":
            got.append(op)
    finally:
        await client.close()
    assert got == [
        (b"MSG foo.a 1 r 5", b"hello"),
        (b"HMSG foo.b 1 24 26", b"NATS/1.0\r\nA: b\r\nC: d\r\n\r\nhi"),
    ]


async def test_info_fields_match_reference(server_kind: str, server_pool: ServerPool) -> None:
    """The first INFO has the reference's field names and JSON types.

    Values that legitimately differ (ids, version, go, host, port, nonce, xkey)
    are ignored; git_commit/go/xkey/api_lvl are Go-server specifics a client
    does not depend on, so jetlake may omit them.
    """
    server = server_pool.get(server_kind)
    ref = server_pool.get("nats-server")
    async with await RawClient.connect(server.host, server.port) as mine:
        info = mine.info
    async with await RawClient.connect(ref.host, ref.port) as theirs:
        ref_info = theirs.info
    optional = {"api_lvl"}
    ref_shape = {k: v for k, v in info_shape(ref_info).items() if k not in optional}
    mine_shape = info_shape(info)
    assert {k: mine_shape.get(k) for k in ref_shape} == ref_shape
    for key in ("server_id", "version", "host", "port", "client_id"):
        assert key in info, f"INFO lacks {key}"
    assert info["port"] == server.port
    assert info["max_payload"] == 1024 * 1024
    assert info["headers"] is True
    assert info["proto"] == 1
    assert "auth_required" not in info


@pytest.mark.parametrize("protocol", [0, 1])
async def test_info_answering_connect(
    server_kind: str, server_pool: ServerPool, protocol: int
) -> None:
    """After the first PONG a protocol-1 client gets an INFO marked connect_info, naming its
    account; a protocol-0 client (no async INFO) gets none, and nobody gets it twice."""
    server = server_pool.get(server_kind)
    async with await RawClient.connect(server.host, server.port) as client:
        await client.handshake(protocol=protocol)
        for _ in range(2):  # read_op sets INFO lines aside in client.infos
            await client.send(b"PING\r\n")
            assert await client.read_op() == (b"PONG", None)
    if protocol == 0:
        assert client.infos == []
        return
    (info,) = client.infos
    assert info["connect_info"] is True and info["remote_account"] == "$G"
    assert info["client_id"] == client.info["client_id"]
    assert info_shape(info).keys() >= info_shape(client.info).keys() - {"nonce"}


async def test_max_payload_refused_by_nats_py(server_kind: str, server_pool: ServerPool) -> None:
    """nats-py reads max_payload from INFO and refuses oversize publishes client-side."""
    import nats
    from nats.errors import MaxPayloadError

    server = server_pool.get(server_kind, config="max_payload: 100")
    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=2)
    try:
        assert nc.max_payload == 100
        with pytest.raises(MaxPayloadError):
            await nc.publish("foo", b"x" * 101)
        await nc.publish("foo", b"x" * 100)
        await asyncio.wait_for(nc.flush(), 5)
    finally:
        await nc.close()
