"""The loopback TCP transport over real sockets: delivery, drops while down, redial, garbage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from consensus.codec import encode
from consensus.tcp import TcpTransport
from consensus.types import Entry, Message, MessageType
from tests.consensus.cluster import until

DEADLINE = 5.0
Pair = tuple[TcpTransport, TcpTransport, list[Message], list[Message]]


def msg(src: str, dst: str, n: int) -> Message:
    return Message(MessageType.APPEND, src, dst, 1, index=n, entries=(Entry(1, n, data=b"x"),))


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    a, b = TcpTransport("a"), TcpTransport("b")
    got_a: list[Message] = []
    got_b: list[Message] = []
    a.set_handler(got_a.append)
    b.set_handler(got_b.append)
    await a.start()
    await b.start()
    a.add_peer("b", b.address)
    b.add_peer("a", a.address)
    try:
        yield a, b, got_a, got_b
    finally:
        await a.close()
        await b.close()


async def test_messages_arrive_in_order_both_ways(pair: Pair) -> None:
    a, b, got_a, got_b = pair
    await until(lambda: a.connected("b") and b.connected("a"), "both connected", DEADLINE)
    for n in range(1, 501):
        a.send(msg("a", "b", n))
    b.send(msg("b", "a", 7))
    await until(lambda: len(got_b) == 500 and len(got_a) == 1, "all delivered", DEADLINE)
    assert [m.index for m in got_b] == list(range(1, 501))
    assert got_b[0] == msg("a", "b", 1)
    assert got_a == [msg("b", "a", 7)]


async def test_a_peer_down_drops_then_redial_delivers(pair: Pair) -> None:
    a, b, _, got_b = pair
    port = b.address[1]
    await b.close()
    await until(lambda: not a.connected("b"), "a notices b is gone", DEADLINE)
    dropped = a.dropped
    a.send(msg("a", "b", 1))
    assert a.dropped == dropped + 1
    back = TcpTransport("b", port=port)
    again: list[Message] = []
    back.set_handler(again.append)
    await back.start()
    try:
        await until(lambda: a.connected("b"), "a redials b", DEADLINE)
        a.send(msg("a", "b", 2))
        await until(lambda: bool(again), "delivery after the restart", DEADLINE)
        assert [m.index for m in again] == [2]
        assert got_b == []
    finally:
        await back.close()


async def test_garbage_costs_only_its_own_connection(pair: Pair) -> None:
    a, b, _, got_b = pair
    host, port = b.address
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"\x00\x00\x00\x05hello")  # a frame with a bad version byte
    assert await asyncio.wait_for(reader.read(), DEADLINE) == b""  # b hung up on it
    writer.close()
    await until(lambda: a.connected("b"), "a connected", DEADLINE)
    a.send(msg("a", "b", 3))
    await until(lambda: bool(got_b), "a's connection still delivers", DEADLINE)
    assert got_b[0].index == 3


async def test_messages_for_someone_else_are_not_delivered(pair: Pair) -> None:
    _, b, _, got_b = pair
    _, writer = await asyncio.open_connection(*b.address)
    writer.write(encode(msg("a", "c", 1)) + encode(msg("a", "b", 2)))  # one connection, in order
    await until(lambda: bool(got_b), "b's own message", DEADLINE)
    writer.close()
    assert [m.index for m in got_b] == [2]


async def test_a_peer_that_stops_reading_is_dropped_from_not_buffered() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def never_reads(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    sink = await asyncio.start_server(never_reads, "127.0.0.1", 0)
    a = TcpTransport("a", max_buffer=1 << 20)
    await a.start()
    a.add_peer("slow", sink.sockets[0].getsockname()[:2])
    try:
        await until(lambda: a.connected("slow"), "connected", DEADLINE)
        big = Message(MessageType.APPEND, "a", "slow", 1, entries=(Entry(1, 1, data=b"x" * 65536),))
        for _ in range(400):  # 26 MB: far more than the socket buffers and the limit hold
            a.send(big)
            await asyncio.sleep(0)  # let each pass's write go out
        assert a.dropped > 0
        peer_transport = a._peers["slow"].transport
        assert peer_transport is not None
        assert peer_transport.get_write_buffer_size() <= (1 << 20) + 2 * 65600
    finally:
        await a.close()
        for writer in accepted:
            writer.close()
        sink.close()


def test_a_send_to_a_connection_closed_before_its_dialler_notices_is_dropped() -> None:
    """uvloop (which the node process runs) raises on a write to a closed handle, and the
    flush runs inside the Raft loop: a peer lost between `send` and `flush` must cost the
    message, which Raft resends, not the node."""
    import uvloop

    async def scenario() -> None:
        a, b = TcpTransport("a"), TcpTransport("b")
        await a.start()
        await b.start()
        a.add_peer("b", b.address)
        try:
            await until(lambda: a.connected("b"), "connected", DEADLINE)
            lost = asyncio.Event()

            class Lost(asyncio.Protocol):
                def connection_lost(self, exc: Exception | None) -> None:
                    lost.set()

            gone, _ = await asyncio.get_running_loop().create_connection(Lost, *b.address)
            gone.abort()
            await asyncio.wait_for(lost.wait(), DEADLINE)  # the handle is closed now
            a._peers["b"].transport = gone  # type: ignore[assignment]  # as the dialler still sees it
            dropped = a.dropped
            a.send(msg("a", "b", 1))
            a.flush()
            assert a.dropped == dropped + 1
        finally:
            await a.close()
            await b.close()

    uvloop.run(scenario())
