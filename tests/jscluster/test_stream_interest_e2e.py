"""Which servers draw a replicated stream's publishes over the routes: its leader alone.

Every server of an R3 stream holds a replica, but only the leader takes publishes,
so only the leader's interest in the stream's subjects is announced to the others
(the reference's leader alone subscribes to them). Read from outside through
`/routez?subs=1`: each server lists what every peer announced to it. After a
stepdown the new leader's interest replaces the old one's. Both kinds alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jscluster.support import Running, eventually, http_json, js_cluster, server_name
from tests.support.servers import ServerProcess, enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

SUBJECT = "interest.orders"


def announcers(server: ServerProcess) -> set[str]:
    """The peers that announced interest in SUBJECT to `server`."""
    routes = http_json(server, "/routez?subs=1").get("routes") or []
    return {
        str(route.get("remote_name"))
        for route in routes
        if SUBJECT in (route.get("subscriptions_list") or [])
    }


async def announced_by_leader_alone(c: Running) -> str:
    """The leader's name once every other server hears of SUBJECT from it alone."""
    leader = server_name(await c.leader("ORDERS"))

    async def check() -> str:
        for server in c.servers:
            expected = set() if server_name(server) == leader else {leader}
            if announcers(server) != expected:
                return ""
        return leader

    return await eventually(check, f"only {leader} announcing {SUBJECT}")


async def test_only_the_leader_draws_the_stream_subjects(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("ORDERS", [SUBJECT])
        await c.js.publish(SUBJECT, b"first")
        first = await announced_by_leader_alone(c)
        other = next(s for s in c.servers if server_name(s) != first)
        await c.lead_on("ORDERS", other)
        assert await announced_by_leader_alone(c) == server_name(other)
        ack = await c.js.publish(SUBJECT, b"second")
        assert ack.seq == 2
