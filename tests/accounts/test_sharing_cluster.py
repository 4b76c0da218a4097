"""Imports across a cluster's routes, on the reference and jetlake alike: a stream import
reaches importers on every server exactly once (one queue member in the whole cluster),
and a service request from one server is answered by a responder on another through the
mapped reply."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.msg import Msg

from tests.conftest import Connect
from tests.support.clients import barrier, crossed, drain_pending, sync
from tests.support.cluster import ONE_ROUTE_PER_PEER, start_cluster, stop_all, wait_mesh
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

CONFIG = (
    ONE_ROUTE_PER_PEER
    + """
accounts {
  A {
    users [ {user: a, password: a} ]
    exports [ {stream: "a.>"}, {service: "svc.>"} ]
  }
  B {
    users [ {user: b, password: b} ]
    imports [
      {stream: {account: A, subject: "a.>"}, prefix: "p"}
      {service: {account: A, subject: "svc.x"}, to: "local.x"}
    ]
  }
}
"""
)


def url(server: ServerProcess, user: str) -> str:
    return f"nats://{user}:{user}@{server.host}:{server.port}"


async def test_imports_across_routes(server_kind: str, tmp_path: Path, connect: Connect) -> None:
    servers = start_cluster(server_kind, tmp_path, 2, config=CONFIG)
    try:
        wait_mesh(servers, ["S0", "S1"])
        a0 = await connect(url(servers[0], "a"))
        b0, b1 = [await connect(url(s, "b")) for s in servers]
        subs = [await b0.subscribe("p.a.>"), await b1.subscribe("p.a.>")]
        await barrier(b0, b1)

        await poll_async(lambda: crossed(a0, "a.probe", subs[1]), "A's messages on S1")
        for sub in subs:
            await drain_pending(sub)
        await a0.publish("a.once", b"marker")
        await a0.publish("a.done", b"end")
        await sync(a0)
        for sub, nc in zip(subs, (b0, b1), strict=True):
            got = [(await sub.next_msg(5)).data, (await sub.next_msg(5)).data]
            await barrier(a0, nc)
            got += [m.data for m in await drain_pending(sub)]
            assert got == [b"marker", b"end"], f"each importer gets one copy, got {got}"

        # One member of a queue group in the whole cluster takes each copy.
        queues = [
            await b0.subscribe("p.a.q", queue="workers"),
            await b1.subscribe("p.a.q", queue="workers"),
        ]
        await barrier(b0, b1)
        for i in range(20):
            await a0.publish("a.q", str(i).encode())
        await sync(a0)
        got: list[bytes] = []
        deadline = asyncio.get_running_loop().time() + 10
        while len(got) < 20 and asyncio.get_running_loop().time() < deadline:
            for sub in queues:
                got += [m.data for m in await drain_pending(sub)]
            await barrier(a0, b0, b1)
        await barrier(a0, b0, b1)
        for sub in queues:
            got += [m.data for m in await drain_pending(sub)]
        assert sorted(got, key=int) == [str(i).encode() for i in range(20)]

        # A responder on S0 answers B's requests made on S1.
        a_responder = await connect(url(servers[0], "a"))

        async def respond(msg: Msg) -> None:
            await a_responder.publish(msg.reply, b"answer to " + msg.data)

        await a_responder.subscribe("svc.>", cb=respond)
        await sync(a_responder)

        async def answered() -> bool:
            try:
                reply = await b1.request("local.x", b"q", timeout=0.5)
            except Exception:  # no responders or a timeout until the interest arrived
                return False
            return bool(reply.data == b"answer to q")

        await poll_async(answered, "an answer from S0's responder")
    finally:
        stop_all(servers)
