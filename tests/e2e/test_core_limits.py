"""Server-side limits: slow consumers, stale connections, max_connections.

These are the protections that keep one bad client from hurting the server or
the other clients; the tests check both the offender's fate and that a
well-behaved neighbour is unaffected. Keepalive runs on a 250ms interval so
the stale case completes in about a second, while a client that answers has
PING_MAX intervals (750ms) to do so: a loaded 2-core CI machine can keep the
test process off the CPU for a few hundred milliseconds, and no client
promises a PONG faster than that.
"""

from __future__ import annotations

import asyncio

import pytest
from nats.errors import Error as NatsError

from tests.conftest import Connect, MakeServer
from tests.support.clients import barrier, sync
from tests.support.http import get_json
from tests.support.poll import poll_async
from tests.support.raw import Closed, Outcome, RawClient

PING_INTERVAL_MS = 250
PING_MAX = 3
STALE_CONFIG = f'ping_interval: "{PING_INTERVAL_MS}ms"\nping_max: {PING_MAX}\n'
NONE_BY_KIND = {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}  # /varz's *_stats


async def test_slow_consumer_is_cut_off_others_unaffected(
    make_server: MakeServer, connect: Connect
) -> None:
    """A subscriber that never reads is disconnected; a reading one gets everything.

    Observed on the reference: the slow connection is simply closed -- no
    ``-ERR 'Slow Consumer'`` reaches it (its socket is full) -- after it got a
    prefix of the messages, intact. The log says "Slow Consumer Detected:
    WriteDeadline of 100ms exceeded" (or "MaxPending of N Exceeded" with the
    default 64MB pending limit). An -ERR before the close is tolerated here.
    """
    # A deadline short enough to meet within the test, long enough that the reading
    # client, sharing a loaded machine, is not cut off too.
    server = make_server(config='write_deadline: "1s"\n')
    slow = await RawClient.connect(server.host, server.port, rcvbuf=4096, limit=65536)
    await slow.handshake()
    assert await slow.outcome(b"SUB big 1\r\n") == Outcome((), closed=False)
    publisher, reader_nc = await connect(server), await connect(server)
    good = await reader_nc.subscribe("big")
    await sync(reader_nc)

    # 75 MiB: beyond the reference's default 64 MiB pending limit too, so a
    # server that enforces only a pending-bytes limit also has to react.
    n, payload = 1200, b"x" * 65536
    for i in range(n):
        await publisher.publish("big", payload)
        if i % 50 == 49:
            await sync(publisher)
    await barrier(publisher, reader_nc)
    assert good.pending_msgs == n, "the well-behaved subscriber lost messages"

    msgs, other = 0, []
    try:
        while True:
            line, data = await slow.read_op(timeout=10)
            if line.startswith(b"MSG "):
                assert line == b"MSG big 1 65536" and data == payload
                msgs += 1
            else:
                other.append(line)
    except Closed as closed:
        other.extend(closed.lines)
    finally:
        await slow.close()
    assert msgs < n, "the slow consumer was never cut off"
    assert set(other) <= {b"-ERR 'Slow Consumer'"}, other
    assert publisher.is_connected and reader_nc.is_connected


async def test_write_deadline_cuts_a_stalled_reader(
    make_server: MakeServer, connect: Connect
) -> None:
    """8 MiB is far below max_pending: only the write deadline can cut the stalled reader."""
    server = make_server("-m", "-1", config='write_deadline: "100ms"\n')
    slow = await RawClient.connect(server.host, server.port, rcvbuf=4096, limit=65536)
    await slow.handshake()
    assert await slow.outcome(b"SUB big 1\r\n") == Outcome((), closed=False)
    publisher = await connect(server)
    for _ in range(128):
        await publisher.publish("big", b"x" * 65536)
    await sync(publisher)
    await poll_async(  # another process's log file
        lambda: "WriteDeadline of 100ms exceeded" in server.log(), server.log, 10
    )
    await slow.close()
    assert publisher.is_connected
    counted = await get_json(server.http_url + "/varz")
    assert counted["slow_consumers"] == 1
    assert counted["slow_consumer_stats"] == {**NONE_BY_KIND, "clients": 1}


async def test_stale_connection(make_server: MakeServer, connect: Connect) -> None:
    """Unanswered PINGs: ping_max PINGs, then -ERR 'Stale Connection' and close.

    A nats-py client on the same server answers the PINGs and stays connected.
    """
    server = make_server("-m", "-1", config=STALE_CONFIG)
    healthy = await connect(server)
    mute = await RawClient.connect(server.host, server.port)
    mute.keepalives = True
    await mute.send(b'CONNECT {"verbose":false,"protocol":1}\r\n')
    loop = asyncio.get_running_loop()
    started = loop.time()
    lines = await mute.expect_closed(timeout=5)
    elapsed = loop.time() - started
    await mute.close()
    assert lines == [b"PING"] * PING_MAX + [b"-ERR 'Stale Connection'"]
    least = (PING_MAX - 1) * PING_INTERVAL_MS / 1000
    assert least < elapsed < 4, f"stale detection took {elapsed:.2f}s"
    assert healthy.is_connected
    await sync(healthy)
    counted = await get_json(server.http_url + "/varz")
    assert counted["stale_connections"] == 1
    assert counted["stale_connection_stats"] == {**NONE_BY_KIND, "clients": 1}


async def test_ping_answered_keeps_connection(make_server: MakeServer) -> None:
    """A raw client that answers every PING outlives several ping intervals."""
    server = make_server(config=STALE_CONFIG)
    async with await RawClient.connect(server.host, server.port) as c:
        await c.handshake()
        c.keepalives = True
        for _ in range(PING_MAX + 2):  # beyond ping_max * interval
            await c.read_until(rb"^PING$", timeout=5)
            await c.send(b"PONG\r\n")
        c.keepalives = False  # the next PING may come inside the check's round trip
        assert await c.outcome() == Outcome((), closed=False)


async def test_max_connections(make_server: MakeServer, connect: Connect) -> None:
    """Connection max_connections+1 gets INFO, then the -ERR, then a close."""
    server = make_server(config="max_connections: 2\n")
    first = await connect(server)
    await connect(server)
    # nats-py either reads the -ERR or trips over the closed socket first.
    with pytest.raises((NatsError, OSError)) as refused:
        await connect(server)
    if isinstance(refused.value, NatsError):
        assert "maximum connections exceeded" in str(refused.value).lower()

    extra = await RawClient.connect(server.host, server.port, read_info=False)
    lines = await extra.expect_closed()
    await extra.close()
    assert lines == [b"-ERR 'maximum connections exceeded'"]
    assert len(extra.infos) == 1, "the refused client still gets INFO first"

    # A slot frees up once a client leaves (the server notices asynchronously).
    await first.close()
    nc = await poll_async(
        lambda: connect(server), "a connection in the freed slot", 5, retry=(NatsError, OSError)
    )
    assert nc.is_connected
