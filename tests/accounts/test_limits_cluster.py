"""An account's `max_connections` on a cluster, the reference and jetlake alike: each
server tells the others its count with `$SYS.ACCOUNT.<account>.SERVER.CONNS`, and a
CONNECT past the limit is refused on whichever server it lands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nats.aio.subscription import Subscription

from tests.conftest import Connect
from tests.support.clients import routed_interest
from tests.support.cluster import ONE_ROUTE_PER_PEER, start_cluster, stop_all, wait_mesh
from tests.support.poll import poll_async
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess

CONFIG = (
    ONE_ROUTE_PER_PEER
    + """
accounts {
  LIM { users [ {user: lim, password: lim} ], limits { max_connections: 2 } }
  SYS { users [ {user: sys, password: sys} ] }
}
system_account: SYS
"""
)
REFUSED = (b"-ERR 'maximum account active connections exceeded'",)


async def attempt(server: ServerProcess) -> tuple[RawClient, tuple[bytes, ...], bool]:
    client = await RawClient.connect(server.host, server.port)
    out = await client.outcome(b'CONNECT {"user":"lim","pass":"lim","verbose":false}\r\n')
    return client, out.lines, out.closed


async def count_from(sub: Subscription, server: str, conns: int) -> dict[str, Any]:
    """The next event in which `server` reports `conns` connections of LIM."""
    while True:
        event = json.loads((await sub.next_msg(10)).data)
        if event["server"]["name"] == server and event["conns"] == conns:
            return dict(event)


async def test_connections_counted_across_the_cluster(
    server_kind: str, tmp_path: Path, connect: Connect
) -> None:
    servers = start_cluster(server_kind, tmp_path, 2, config=CONFIG)
    try:
        wait_mesh(servers, ["S0", "S1"])
        # Each server's system client hears the other's counts when that server does.
        events = []
        urls = [f"nats://sys:sys@{server.host}:{server.port}" for server in servers]
        for url, far in zip(urls, reversed(urls), strict=True):
            nc = await connect(url)
            events.append(await nc.subscribe("$SYS.ACCOUNT.LIM.SERVER.CONNS"))
            await routed_interest(nc, far)
        first, lines, closed = await attempt(servers[0])
        assert (lines, closed) == ((), False)
        event = await count_from(events[1], "S0", 1)
        assert event["type"] == "io.nats.server.advisory.v1.account_connections"
        assert (event["acc"], event["name"], event["total_conns"]) == ("LIM", "LIM", 1)
        second, lines, closed = await attempt(servers[1])
        assert (lines, closed) == ((), False)
        await count_from(events[0], "S1", 1)
        for server in servers:  # two in the cluster: a third is refused on either server
            third, lines, closed = await attempt(server)
            assert (lines, closed) == (REFUSED, True)
        await first.close()  # a connection that ends frees its place on the other server
        await count_from(events[1], "S0", 0)
        # The reference applies a count in its own goroutine, at times after its system
        # client got the event: the place comes back soon after, not at once.

        async def admitted() -> tuple[RawClient, tuple[bytes, ...], bool] | None:
            made = await attempt(servers[1])
            return None if made[1:] == (REFUSED, True) else made

        third, lines, closed = await poll_async(admitted, "the freed place on S1", 5)
        assert (lines, closed) == ((), False)
        await second.close()
        await third.close()
    finally:
        stop_all(servers)
