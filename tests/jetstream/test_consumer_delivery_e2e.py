"""Push deliveries on the wire, byte level, against both servers.

jetlake hands a consumer's run of messages to its inbox in one go when one client
subscription without an auto-unsubscribe limit listens there; otherwise each
message is routed like a publish. Either way a subscriber must see what it sees
from the reference: every message, in order, with the ack reply layout clients
parse, and not one message past its auto-unsubscribe limit.
"""

from __future__ import annotations

from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess

COUNT = 300  # more than one pump delivers at once (log.consumers.consumer.SLICE)


async def filled_stream(nc: NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(COUNT):
        await js.publish_async(f"s.{i % 3}", f"m{i}".encode())
    await js.publish_async_completed()


async def listener(server: ServerProcess, script: bytes) -> RawClient:
    client = await RawClient.connect(server.host, server.port)
    await client.handshake()
    assert (await client.outcome(script)).lines == ()
    return client


async def push_consumer(nc: NATS) -> None:
    cfg = {"durable_name": "p", "deliver_subject": "dlv", "ack_policy": "none"}
    created = await api(nc, "$JS.API.CONSUMER.CREATE.S.p", {"stream_name": "S", "config": cfg})
    assert "error" not in created, created


async def test_run_reaches_every_listener_in_order(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    await filled_stream(nc)
    async with (
        await listener(js_server, b"SUB dlv 1\r\n") as whole,
        await listener(js_server, b"SUB dlv 7\r\nUNSUB 7 5\r\n") as limited,
    ):
        await push_consumer(nc)
        got = [await whole.read_op() for _ in range(COUNT)]
        assert [payload for _, payload in got] == [f"m{i}".encode() for i in range(COUNT)]
        for i, (line, _) in enumerate(got):
            verb, subject, sid, reply, _size = line.split()
            assert (verb, subject, sid) == (b"MSG", f"s.{i % 3}".encode(), b"1")
            tokens = reply.split(b".")
            assert tokens[:4] == [b"$JS", b"ACK", b"S", b"p"]
            assert (tokens[4], tokens[5], tokens[6], tokens[8]) == (
                b"1",
                str(i + 1).encode(),
                str(i + 1).encode(),
                str(COUNT - 1 - i).encode(),
            )
        first = [await limited.read_op() for _ in range(5)]
        assert [payload for _, payload in first] == [f"m{i}".encode() for i in range(5)]
        assert (await limited.outcome()).lines == ()  # nothing past the limit


async def test_single_listener_with_a_limit_gets_no_more(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    await filled_stream(nc)
    async with await listener(js_server, b"SUB dlv 1\r\nUNSUB 1 3\r\n") as limited:
        await push_consumer(nc)
        first = [await limited.read_op() for _ in range(3)]
        assert [payload for _, payload in first] == [b"m0", b"m1", b"m2"]
        assert (await limited.outcome()).lines == ()
