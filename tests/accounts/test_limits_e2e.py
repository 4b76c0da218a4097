"""Account limits on real servers, the reference and jetlake alike: connections per
account, subscriptions per connection, the account's payload size, with the
reference's -ERR lines and which of them close the connection."""

from __future__ import annotations

from tests.support.raw import RawClient
from tests.support.servers import ServerProcess


async def login(server: ServerProcess, user: str) -> RawClient:
    client = await RawClient.connect(server.host, server.port)
    await client.handshake(user=user, **{"pass": user})
    return client


async def test_connections_per_account(shared: ServerProcess) -> None:
    first, second = await login(shared, "lim"), await login(shared, "lim")
    try:
        third = await RawClient.connect(shared.host, shared.port)
        out = await third.outcome(b'CONNECT {"user":"lim","pass":"lim","verbose":false}\r\n')
        assert out.closed
        assert out.lines == (b"-ERR 'maximum account active connections exceeded'",)
        other = await login(shared, "c")  # another account is not counted
        await other.close()
        await second.close()
        # A closed connection frees its place.
        fourth = await RawClient.connect(shared.host, shared.port)
        for _ in range(50):  # the server may see the close after the next CONNECT
            out = await fourth.outcome(b'CONNECT {"user":"lim","pass":"lim","verbose":false}\r\n')
            if not out.closed:
                break
            fourth = await RawClient.connect(shared.host, shared.port)
        assert not out.closed
        await fourth.close()
    finally:
        await first.close()


async def test_subscriptions_per_connection(shared: ServerProcess) -> None:
    one, two = await login(shared, "lim"), await login(shared, "lim")
    try:
        assert (await one.outcome(b"SUB x 1\r\nSUB y 2\r\n")).lines == ()
        assert (await two.outcome(b"SUB x 1\r\nSUB y 2\r\n")).lines == ()  # each its own
        out = await one.outcome(b"SUB z 3\r\n")
        assert (out.lines, out.closed) == ((b"-ERR 'maximum subscriptions exceeded'",), False)
        out = await one.outcome(b"UNSUB 1\r\nSUB z 3\r\n")
        assert (out.lines, out.closed) == ((), False)
    finally:
        await one.close()
        await two.close()


async def test_payload_of_the_account(shared: ServerProcess) -> None:
    client = await RawClient.connect(shared.host, shared.port)
    try:
        await client.handshake(user="lim", **{"pass": "lim"})
        assert (await client.outcome(b"PUB x 100\r\n" + b"x" * 100 + b"\r\n")).lines == ()
        # The INFO answering CONNECT (after the first PONG) carries the account's size.
        assert [info["max_payload"] for info in client.infos] == [100]
        out = await client.outcome(b"PUB x 101\r\n" + b"x" * 101 + b"\r\n")
        assert (out.lines, out.closed) == ((b"-ERR 'Maximum Payload Violation'",), True)
    finally:
        await client.close()
