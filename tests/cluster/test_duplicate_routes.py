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


async def test_a_message_on_the_losing_twin_connection_is_delivered(
    tmp_path: object,
    accepted: tuple[int, asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
) -> None:
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
        nc = await nats.connect(server.url)
        try:
            sub = await nc.subscribe("dup.x")
            await nc.flush()
            await read_until(first_r, b"RS+ $G dup.x")  # the server took the first one

            second_r, second_w = await asyncio.open_connection("127.0.0.1", cluster_port)
            connect = {"name": PEER_ID, "cluster": "C", "headers": True, "verbose": False}
            second_w.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
            second_w.write(peer_info(peer_port))
            await second_w.drain()
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
        first_w.close()
    finally:
        server.stop()
