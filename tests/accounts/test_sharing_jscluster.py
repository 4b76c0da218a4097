"""A push consumer's deliveries imported into another account on a JetStream cluster, the
reference and jetlake alike: when the exporting account has a subscriber of the deliver
subject on another server too, every subscriber of either account still gets one copy."""

from __future__ import annotations

import json
from pathlib import Path

from nats.aio.subscription import Subscription

from tests.conftest import Connect
from tests.jscluster.support import eventually, request, start_js_cluster, stop
from tests.support.clients import barrier, drain_pending, sync

ACCOUNTS = """
accounts {
  A { users [ {user: a, password: a} ], jetstream: enabled
      exports [ {stream: "deliver.>"} ] }
  B { users [ {user: b, password: b} ]
      imports [ {stream: {account: A, subject: "deliver.>"}} ] }
}
"""
COUNT = 10


async def test_imported_deliveries_once_on_every_server(
    server_kind: str, tmp_path: Path, connect: Connect
) -> None:
    servers = start_js_cluster(server_kind, tmp_path, 2, config=ACCOUNTS)
    try:
        a = [await connect(f"nats://a:a@{s.host}:{s.port}") for s in servers]
        b = [await connect(f"nats://b:b@{s.host}:{s.port}") for s in servers]
        a_subs = [await nc.subscribe("deliver.x") for nc in a]
        b_subs = [await nc.subscribe("deliver.x") for nc in b]
        await barrier(*a, *b)
        stream = {"name": "S", "subjects": ["s.>"], "num_replicas": 1}

        async def created() -> bool:  # the meta group elects its leader on its own time
            body = json.dumps(stream).encode()
            answer = await request(a[0], "$JS.API.STREAM.CREATE.S", body)
            return "error" not in answer

        await eventually(created, "stream S created")
        for i in range(COUNT):
            await a[0].publish(f"s.{i}", str(i).encode())
        await a[0].publish("s.end", b"end")
        await sync(a[0])
        consumer = {"deliver_subject": "deliver.x", "ack_policy": "none"}
        body = json.dumps({"stream_name": "S", "config": consumer}).encode()
        assert "error" not in await request(a[1], "$JS.API.CONSUMER.CREATE.S", body)

        async def until_end(sub: Subscription) -> list[bytes]:
            # Routes keep order: a duplicate of an earlier delivery comes before the end.
            got = [(await sub.next_msg(10)).data]
            while got[-1] != b"end":
                got.append((await sub.next_msg(10)).data)
            return got

        want = [str(i).encode() for i in range(COUNT)] + [b"end"]
        for sub in a_subs + b_subs:
            assert await until_end(sub) == want, f"one copy each on {sub.subject}"
        await barrier(*a, *b)
        for sub in a_subs + b_subs:
            assert [m.data for m in await drain_pending(sub)] == []
    finally:
        stop(servers)
