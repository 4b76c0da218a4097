"""A push consumer's delivery leaves with the PubAck of the publish that stored it.

The stream tells its readers once a run of messages is stored (`Stream._announce`), and
a push consumer woken by it delivers there, not in a later turn of the event loop: so
one publish at a time is delivered in the write that carries its PubAck (one server),
or right after it in the same turn (a replicated stream's leader answers at the commit,
before its own apply). Before, the pump waited for the next turn, after whatever else
that turn read. No sockets: the transport records each write the server makes.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from ingest.server.client import Client
from ingest.server.jetstream import JetStream
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from tests.server.test_fast_routing import Transport, connect
from tests.support.poll import poll_async

PUBLISHES = 5
PUBACK = re.compile(rb"MSG r\.(\d+) 2 \d+\r\n")
DELIVERY = re.compile(rb"MSG s\.(\d+) 1 \$JS\.ACK\.")


class Writes(Transport):
    """Each write on its own, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        super().write(data)
        self.writes.append(bytes(data))


async def test_each_delivery_is_in_the_write_of_its_puback(tmp_path: Path) -> None:
    server = Server(parse_serve_args(["-js", "--store_dir", str(tmp_path)]))
    server._loop = asyncio.get_running_loop()
    js = JetStream(server.opts.jetstream, server, server_id="S", server_name="S")
    server.jetstream = js
    await js.start()
    transport = Writes()
    client = Client(server, 1)
    client.connection_made(transport)  # type: ignore[arg-type]
    try:
        client.data_received(connect(False) + b"SUB d 1\r\nSUB r.> 2\r\n")
        create = b'{"name":"S","subjects":["s.>"]}'
        push = b'{"stream_name":"S","config":{"durable_name":"P","deliver_subject":"d"}}'
        api = b"PUB $JS.API.%b %d\r\n%b\r\n"
        client.data_received(api % (b"STREAM.CREATE.S r.c", len(create), create))
        await poll_async(lambda: js.streams.get("S") is not None, "stream S", 10, interval=0.005)
        client.data_received(api % (b"CONSUMER.CREATE.S.P r.p", len(push), push))
        await poll_async(lambda: js.consumers.count("S") == 1, "consumer P", 10, interval=0.005)
        for n in range(PUBLISHES):
            transport.writes.clear()
            client.data_received(b"PUB s.%d r.%d 1\r\nx\r\n" % (n, n))
            await poll_async(
                lambda: PUBACK.search(b"".join(transport.writes)), f"PubAck {n}", 10, interval=0.005
            )
            [with_ack] = [w for w in transport.writes if PUBACK.search(w)]
            assert PUBACK.findall(with_ack) == [b"%d" % n]
            assert DELIVERY.findall(with_ack) == [b"%d" % n], f"publish {n}: {with_ack!r}"
    finally:
        await js.stop()
        client.close_with("done")
