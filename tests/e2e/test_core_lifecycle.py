"""Process lifecycle as clients see it: shutdown, restart, lame duck.

Operators stop and restart servers under live clients; nats-py must notice,
reconnect to the same address and resume its subscriptions, and a graceful
stop must exit 0 so supervisors do not count it as a crash.
"""

from __future__ import annotations

import asyncio
import signal

from tests.conftest import Connect, MakeServer
from tests.support.clients import sync
from tests.support.raw import Closed, RawClient
from tests.support.servers import ServerProcess

# The reference refuses a lame_duck_duration under 30s; the grace period (the
# wait before the first client is closed) may be short. With few clients the
# reference closes them all and exits within ~2s, not 30.
LAME_DUCK_CONFIG = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "100ms"\n'


async def test_sigterm_exits_zero_and_disconnects_clients(
    server: ServerProcess, connect: Connect
) -> None:
    """SIGTERM: clients see the disconnect, the process exits 0 promptly."""
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    nc = await connect(server, closed_cb=on_closed)
    await nc.subscribe("x")
    await sync(nc)
    assert await server.stop_async() == 0
    await asyncio.wait_for(closed.wait(), 5)


async def test_sigint_exits_zero(server: ServerProcess) -> None:
    """Ctrl-C in a terminal is a graceful stop too."""
    server.send_signal(signal.SIGINT)
    assert await server.wait_exit_async() == 0


async def test_reconnect_after_restart(server: ServerProcess, connect: Connect) -> None:
    """nats-py reconnects to the restarted server on the same port; subscriptions resume."""
    disconnected, reconnected = asyncio.Event(), asyncio.Event()

    async def on_disconnect() -> None:
        disconnected.set()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await connect(
        server,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.05,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
    )
    sub = await nc.subscribe("resume.>")

    async def pong(msg) -> None:
        await msg.respond(b"pong")

    replies = await nc.subscribe("svc", cb=pong)
    await sync(nc)
    port = server.port

    await server.restart_async()
    assert server.port == port
    await asyncio.wait_for(disconnected.wait(), 5)
    await asyncio.wait_for(reconnected.wait(), 10)
    await sync(nc)

    other = await connect(server)
    await other.publish("resume.a", b"after restart")
    msg = await sub.next_msg(timeout=5)
    assert msg.data == b"after restart"
    reply = await other.request("svc", b"ping", timeout=5)
    assert reply.data == b"pong"
    assert replies.delivered >= 1


async def test_lame_duck_mode(make_server: MakeServer, connect: Connect) -> None:
    """SIGUSR2: INFO with ldm:true to protocol-1 clients, no new clients, all closed, exit 0.
    A client not yet sent its first PONG gets no INFO: it may be reading for that PONG."""
    server = make_server(config=LAME_DUCK_CONFIG)
    ldm_seen = asyncio.Event()

    async def on_lame_duck() -> None:
        ldm_seen.set()

    nc = await connect(server, lame_duck_mode_cb=on_lame_duck)
    raws = []
    for _ in range(2):
        raw = await RawClient.connect(server.host, server.port)
        await raw.handshake()
        raws.append(raw)
    unponged = await RawClient.connect(server.host, server.port)
    await unponged.send('CONNECT {"verbose": true, "protocol": 1}\r\n')
    assert await unponged.read_line() == b"+OK"  # its CONNECT is in, and no PING yet

    server.send_signal(signal.SIGUSR2)
    await asyncio.wait_for(ldm_seen.wait(), 5)
    # The listener is closed as soon as lame duck starts (reference: refused).
    try:
        late = await RawClient.connect(server.host, server.port, timeout=2)
    except OSError:
        pass
    else:
        lines = await late.expect_closed(timeout=5)
        await late.close()
        raise AssertionError(f"a new client was accepted during lame duck: {lines!r}")
    for raw in raws:
        try:
            lines = await raw.expect_closed(timeout=40)
        except Closed as exc:  # pragma: no cover - expect_closed returns on close
            lines = exc.lines
        finally:
            await raw.close()
        assert lines == [], f"only INFO expected before the close: {lines!r}"
        ldm_infos = [i for i in raw.infos if i.get("ldm") is True]
        assert ldm_infos, f"no INFO with ldm:true among {raw.infos!r}"
    try:
        lines = await unponged.expect_closed(timeout=40)
    finally:
        await unponged.close()
    assert (lines, unponged.infos) == ([], []), "an INFO before the client's first PONG"
    assert await server.wait_exit_async(40) == 0
    assert not nc.is_connected
