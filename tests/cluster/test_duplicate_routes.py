"""Two connections to one peer, dialled by both ends at once: what the peer sent on the
losing one before it learnt of the winner still arrives.

Both ends pick the winner alone (the connection dialled by the smaller server id), so
for a moment each may send on a different one. The peer here is this test speaking the
route protocol on raw sockets, so the moment is made exactly: the server has taken the
peer's second connection (its interest arrives on it) when the peer sends a message on
the first. jetlake reads the loser for a grace period, then closes it; before, it closed
the loser at once and the message was lost (a `nats server list` on a cluster just
formed once got 2 answers of 3). jetlake alone: the reference's route handshake
(pooling, compression) asks more of a scripted peer than this one speaks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats
import pytest

from tests.support.cluster import free_port, route_url
from tests.support.servers import ServerProcess, start_server

pytestmark = pytest.mark.timeout(60)
PEER_ID = "AAAAPEER"  # smaller than any server id ("N…"): the peer's own dial wins
DEADLINE = 10.0


def peer_info(port: int) -> bytes:
    info = {
        "server_id": PEER_ID,
        "name": "P",
        "version": "2.15.1",
        "host": "127.0.0.1",
        "port": port,
        "headers": True,
        "cluster": "C",
        "ip": f"nats-route://127.0.0.1:{port}/",
    }
    return b"INFO " + json.dumps(info).encode() + b"\r\n"


async def read_until(reader: asyncio.StreamReader, wanted: bytes) -> bytes:
    """Route lines up to the first containing `wanted` (PINGs answered by nobody: the
    test ends long before a ping interval)."""
    seen = b""
    while wanted not in seen:
        line = await asyncio.wait_for(reader.readline(), DEADLINE)
        if not line:
            raise AssertionError(f"route closed before {wanted!r}; got {seen!r}")
        seen += line
    return seen


@pytest.fixture
async def accepted() -> AsyncIterator[
    tuple[int, asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
]:
    """The peer's route listener: connections the server dials, in order."""
    queue: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    listener = await asyncio.start_server(lambda r, w: queue.put_nowait((r, w)), "127.0.0.1", 0)
    yield listener.sockets[0].getsockname()[1], queue
    listener.close()


Link = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture
async def routed(
    tmp_path: object,
    accepted: tuple[int, asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
) -> AsyncIterator[tuple[ServerProcess, int, Link]]:
    """A jetlake server, the cluster port it listens on, and the route it dialled to the
    peer, past the peer's INFO (so registered there)."""
    peer_port, dialled = accepted
    cluster_port = free_port()
    args = ["-n", "S0", "--cluster", route_url(cluster_port), "--cluster_name", "C"]
    server: ServerProcess = start_server(
        "jetlake",
        *args,
        "--routes",
        route_url(peer_port),
        tmp_path=tmp_path,
        name="S0",  # type: ignore[arg-type]
    )
    try:
        first_r, first_w = await asyncio.wait_for(dialled.get(), DEADLINE)
        await read_until(first_r, b"INFO ")  # the server's CONNECT, then its INFO
        first_w.write(peer_info(peer_port))
        await first_w.drain()
        yield server, cluster_port, (first_r, first_w)
        first_w.close()
    finally:
        server.stop()


async def dial_twin(cluster_port: int, peer_port: int) -> Link:
    """The peer's own connection to the server, which wins over the one the server dialled."""
    reader, writer = await asyncio.open_connection("127.0.0.1", cluster_port)
    connect = {"name": PEER_ID, "cluster": "C", "headers": True, "verbose": False}
    writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
    writer.write(peer_info(peer_port))
    await writer.drain()
    return reader, writer


async def test_a_message_on_the_losing_twin_connection_is_delivered(
    routed: tuple[ServerProcess, int, Link],
    accepted: tuple[int, asyncio.Queue[Link]],
) -> None:
    server, cluster_port, (first_r, first_w) = routed
    nc = await nats.connect(server.url)
    try:
        sub = await nc.subscribe("dup.x")
        await nc.flush()
        await read_until(first_r, b"RS+ $G dup.x")  # the server took the first one

        second_r, second_w = await dial_twin(cluster_port, accepted[0])
        await read_until(second_r, b"RS+ $G dup.x")  # ... and now prefers the second

        first_w.write(b"RMSG $G dup.x 5\r\nlate!\r\n")  # sent before the peer learnt
        await first_w.drain()
        msg = await sub.next_msg(timeout=DEADLINE)
        assert msg.data == b"late!"
        assert await asyncio.wait_for(first_r.read(), DEADLINE + 5) == b""  # then closed
        second_w.write(b"RMSG $G dup.x 3\r\nwon\r\n")
        await second_w.drain()
        assert (await sub.next_msg(timeout=DEADLINE)).data == b"won"
        second_w.close()
    finally:
        await nc.close()


async def test_the_peers_interest_outlives_the_losing_twin_until_its_snapshot(
    routed: tuple[ServerProcess, int, Link],
    accepted: tuple[int, asyncio.Queue[Link]],
) -> None:
    """A reply published between the switch to the twin and the peer's interest arriving
    on it still goes to the peer, as does one to an inbox the peer announced on the losing
    twin meanwhile; what the peer's snapshot leaves out stops going."""
    server, cluster_port, (first_r, first_w) = routed
    nc = await nats.connect(server.url)
    try:
        marker = await nc.subscribe("dup.marker")
        first_w.write(b"RS+ $G dup.reply\r\n")  # a requester's inbox on the peer
        await first_w.drain()
        await nc.flush()
        await read_until(first_r, b"RS+ $G dup.marker")

        second_r, second_w = await dial_twin(cluster_port, accepted[0])
        await read_until(second_r, b"RS+ $G dup.marker")  # the server switched
        await nc.publish("dup.reply", b"answer")  # before the peer announced anything here
        await read_until(second_r, b"RMSG $G dup.reply")

        first_w.write(b"RS+ $G dup.late\r\n")  # the peer has not learnt of the switch yet
        first_w.write(b"RMSG $G dup.marker 4\r\nsent\r\n")  # read once the RS+ was
        await first_w.drain()
        await marker.next_msg(timeout=DEADLINE)
        await nc.publish("dup.late", b"answer")
        await read_until(second_r, b"RMSG $G dup.late")

        second_w.write(b"RS+ $G dup.other\r\nPING\r\n")  # the peer's snapshot, then PING
        await second_w.drain()
        await read_until(second_r, b"PONG")
        await nc.publish("dup.reply", b"stale")
        await nc.publish("dup.other", b"wanted")
        seen = await read_until(second_r, b"RMSG $G dup.other")
        assert b"dup.reply" not in seen
        second_w.close()
    finally:
        await nc.close()
