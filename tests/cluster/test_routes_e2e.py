"""Three servers meshed by routes, the reference and jetlake side by side.

Each server has only S0 as a seed route, so a full mesh means gossip worked.
Completeness across routes is checked with a sentinel: a route delivers in
order, so once a subscriber got the sentinel published after a batch, every
message of the batch that was routed to it has arrived.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError

from tests.conftest import KIND_IDS
from tests.support.cluster import (
    has_route_interest,
    routez,
    start_cluster,
    stop_all,
    varz,
    wait_mesh,
)
from tests.support.http import get_json
from tests.support.poll import poll
from tests.support.servers import ServerProcess, enabled_kinds

NAMES = ["S0", "S1", "S2"]


@pytest.fixture(scope="module", params=enabled_kinds(), ids=lambda kind: KIND_IDS[kind])
def mesh(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    """A shared 3-server cluster; tests use their own subjects and leave it as they found it."""
    servers = start_cluster(str(request.param), tmp_path_factory.mktemp("mesh"))
    try:
        wait_mesh(servers, NAMES)
        yield servers
    finally:
        stop_all(servers)


@pytest.fixture
async def clients(mesh: list[ServerProcess]) -> AsyncIterator[list[NATS]]:
    """One client per server."""
    conns = [await nats.connect(s.url, allow_reconnect=False) for s in mesh]
    yield conns
    for nc in conns:
        await nc.close()


async def interest_reaches(server: ServerProcess, subject: str) -> None:
    await asyncio.to_thread(
        poll, lambda: has_route_interest(server, subject), f"interest in {subject}"
    )


def test_full_mesh_from_one_seed(mesh: list[ServerProcess]) -> None:
    for server, name in zip(mesh, NAMES, strict=True):
        routes = routez(server)
        assert routes["num_routes"] == 2
        assert {r["remote_name"] for r in routes["routes"]} == set(NAMES) - {name}
        solicited = {r["remote_name"]: r["is_configured"] for r in routes["routes"]}
        if name != "S0":  # its seed was configured, the other route came from gossip
            assert solicited.get("S0") is not None


async def test_pub_sub_across_servers(mesh: list[ServerProcess], clients: list[NATS]) -> None:
    a, b, c = clients
    sub = await a.subscribe("xs.>")
    await a.flush()
    await interest_reaches(mesh[2], "xs.>")
    await c.publish("xs.one", b"1", headers={"K": "v"})
    await b.publish("xs.two", b"2", reply="r.x")
    got = [await sub.next_msg(timeout=5) for _ in range(2)]
    assert sorted((m.subject, m.data, m.reply) for m in got) == [
        ("xs.one", b"1", ""),
        ("xs.two", b"2", "r.x"),
    ]
    assert next(m for m in got if m.subject == "xs.one").headers == {"K": "v"}
    await sub.unsubscribe()


async def test_a_message_crosses_one_route(mesh: list[ServerProcess], clients: list[NATS]) -> None:
    """S1 must not pass S2's messages on to S0: S0 would see each twice."""
    a, b, c = clients
    sub_a, sub_b = await a.subscribe("hop.>"), await b.subscribe("hop.>")
    for nc in (a, b):
        await nc.flush()
    for server in mesh[1:]:
        await interest_reaches(server, "hop.>")
    for i in range(20):
        await c.publish(f"hop.{i}", b"")
    await c.publish("hop.end", b"")
    got_b = await _until(sub_b, "hop.end")
    # S1 has handled every message from S2 by now; its own message follows any it
    # might have passed on over the same S1->S0 route. S2's own copies reach S0 over
    # the S2->S0 route, which may run behind: they are all in once its "hop.end" is.
    await b.publish("hop.end2", b"")
    got_a = await _until(sub_a, "hop.end2")
    if "hop.end" not in got_a:
        got_a += await _until(sub_a, "hop.end")
    expected = [f"hop.{i}" for i in range(20)]
    assert got_b == expected
    assert [s for s in got_a if s != "hop.end"] == expected
    for sub in (sub_a, sub_b):
        await sub.unsubscribe()


async def test_a_subject_routed_here_reaches_a_later_subscriber_on_a_peer(
    mesh: list[ServerProcess], clients: list[NATS]
) -> None:
    """The compiled fast path learns a repeated subject as routed on this server alone: a
    peer's new interest must undo that."""
    a, b, _ = clients
    local = await a.subscribe("learnt.x")
    for i in range(5):
        await a.publish("learnt.x", b"%d" % i)
    for _ in range(5):
        await local.next_msg(timeout=5)
    remote = await b.subscribe("learnt.x")
    await b.flush()
    await interest_reaches(mesh[0], "learnt.x")
    await a.publish("learnt.x", b"after")
    assert (await remote.next_msg(timeout=5)).data == b"after"
    assert (await local.next_msg(timeout=5)).data == b"after"
    for sub in (local, remote):
        await sub.unsubscribe()


async def test_a_subject_forwarded_in_runs_reaches_later_subscribers_here_and_elsewhere(
    mesh: list[ServerProcess], clients: list[NATS]
) -> None:
    """A subject nothing here takes and one peer does is learnt as that peer's: the
    compiled codec hands runs of its PUBs to the route. Each message arrives once and in
    order, replies kept; a subscriber joining here, then one on the third server, gets
    the next message."""
    a, b, c = clients
    remote = await b.subscribe("fwd.x")
    await b.flush()
    await interest_reaches(mesh[0], "fwd.x")
    for i in range(3):  # learnt the second time; then gathered while the socket is read
        for j in range(30):
            await a.publish("fwd.x", b"%d" % (i * 30 + j), reply="" if j % 2 else "fwd.r")
        await a.flush()
    got = [await remote.next_msg(timeout=5) for _ in range(90)]
    assert [(m.data, m.reply) for m in got] == [
        (b"%d" % i, "" if i % 30 % 2 else "fwd.r") for i in range(90)
    ]
    local = await a.subscribe("fwd.x")
    await a.publish("fwd.x", b"local")
    assert (await local.next_msg(timeout=5)).data == b"local"
    assert (await remote.next_msg(timeout=5)).data == b"local"
    await local.unsubscribe()
    await a.flush()
    third = await c.subscribe("fwd.x")
    await c.flush()
    await asyncio.to_thread(
        poll,
        lambda: all(
            "fwd.x" in (r.get("subscriptions_list") or []) for r in routez(mesh[0])["routes"]
        ),
        "fwd.x from both peers",
    )
    for _ in range(3):
        await a.publish("fwd.x", b"third")
    for sub in (remote, third):
        assert [(await sub.next_msg(timeout=5)).data for _ in range(3)] == [b"third"] * 3
    for sub in (remote, third):
        await sub.unsubscribe()


async def test_queue_group_gets_each_message_once(
    mesh: list[ServerProcess], clients: list[NATS]
) -> None:
    """Members on S0 and S1, publisher on S2: each message reaches exactly one member."""
    a, b, c = clients
    members = [await a.subscribe("work", queue="q"), await b.subscribe("work", queue="q")]
    members.append(await a.subscribe("work", queue="q"))
    ends = [await nc.subscribe("work.end") for nc in (a, b)]
    for nc in (a, b):
        await nc.flush()
    await interest_reaches(mesh[2], "work")
    await interest_reaches(mesh[2], "work.end")
    for i in range(200):
        await c.publish("work", str(i).encode())
    await c.publish("work.end", b"")
    for end in ends:
        await end.next_msg(timeout=5)
    got = [m.data for sub in members for m in [*await _drain(sub)]]
    assert sorted(got, key=int) == [str(i).encode() for i in range(200)]
    assert all(sub.delivered for sub in members[:2])  # both servers got a share
    for sub in members + ends:
        await sub.unsubscribe()


async def test_queue_group_spreads_over_local_and_remote_members(
    mesh: list[ServerProcess], clients: list[NATS]
) -> None:
    """As on the reference, a member on the publisher's server has no priority."""
    a, b, _ = clients
    local, remote = await a.subscribe("spread", queue="q"), await b.subscribe("spread", queue="q")
    end = await b.subscribe("spread.end")
    await b.flush()
    await interest_reaches(mesh[0], "spread")
    await interest_reaches(mesh[0], "spread.end")
    for _ in range(200):
        await a.publish("spread", b"x")
    await a.publish("spread.end", b"")
    await end.next_msg(timeout=5)
    await a.flush()
    counts = (len(await _drain(local)), len(await _drain(remote)))
    assert sum(counts) == 200 and min(counts) > 0, counts
    for sub in (local, remote, end):
        await sub.unsubscribe()


async def test_requests_and_no_responders(mesh: list[ServerProcess], clients: list[NATS]) -> None:
    a, _, c = clients

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"pong:" + msg.data)

    service = await a.subscribe("svc.echo", cb=answer)
    await a.flush()
    await interest_reaches(mesh[2], "svc.echo")
    assert (await c.request("svc.echo", b"hi", timeout=5)).data == b"pong:hi"
    start = time.monotonic()
    with pytest.raises(NoRespondersError):
        await c.request("svc.nobody", b"", timeout=5)
    assert time.monotonic() - start < 2.5  # at once, not after the timeout
    await service.unsubscribe()
    await a.flush()

    await asyncio.to_thread(  # UNSUB travels as RS-
        poll, lambda: not has_route_interest(mesh[2], "svc.echo"), "interest withdrawn"
    )
    with pytest.raises(NoRespondersError):
        await c.request("svc.echo", b"", timeout=5)


async def test_disconnect_withdraws_interest(mesh: list[ServerProcess]) -> None:
    nc = await nats.connect(mesh[1].url, allow_reconnect=False)
    await nc.subscribe("gone.soon")
    await nc.flush()
    await interest_reaches(mesh[0], "gone.soon")
    await nc.close()
    await asyncio.to_thread(
        poll, lambda: not has_route_interest(mesh[0], "gone.soon"), "interest withdrawn"
    )


def test_varz_cluster_block(mesh: list[ServerProcess]) -> None:
    v = varz(mesh[1])
    cluster = v["cluster"]
    assert cluster["name"] == "C"
    assert cluster["addr"] == "127.0.0.1"
    assert cluster["urls"] == [f"127.0.0.1:{_cluster_port(mesh[0])}"]  # its seed
    assert {"cluster_port", "auth_timeout", "tls_timeout", "pool_size"} <= set(cluster)
    assert cluster["pool_size"] == -1
    assert v["routes"] == 2
    assert sorted(v["connect_urls"]) == sorted(f"127.0.0.1:{s.port}" for s in mesh)


def test_routez_entry_shape(mesh: list[ServerProcess]) -> None:
    """Exactly the reference's keys (one route per peer, so no pinned-account field)."""
    entry = routez(mesh[0])["routes"][0]
    assert set(entry) == {
        "rid",
        "remote_id",
        "remote_name",
        "did_solicit",
        "is_configured",
        "ip",
        "port",
        "start",
        "last_activity",
        "rtt",
        "uptime",
        "idle",
        "pending_size",
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "subscriptions",
        "subscriptions_list",
        "compression",
    }
    assert set(routez(mesh[0])) == {"server_id", "server_name", "now", "num_routes", "routes"}


async def test_connz_lists_clients_not_routes(mesh: list[ServerProcess]) -> None:
    nc = await nats.connect(mesh[1].url, allow_reconnect=False)
    try:
        connz = await get_json(mesh[1].http_url + "/connz")
        assert connz["num_connections"] == 1 and connz["total"] == 1
        assert connz["connections"][0]["kind"] == "Client"
    finally:
        await nc.close()


async def test_clients_learn_every_server(mesh: list[ServerProcess]) -> None:
    nc = await nats.connect(mesh[2].url, allow_reconnect=False)
    try:
        assert sorted(nc._server_info["connect_urls"]) == sorted(
            f"127.0.0.1:{s.port}" for s in mesh
        )
        assert {u.port for u in nc.servers} == {s.port for s in mesh}
    finally:
        await nc.close()


def _cluster_port(server: ServerProcess) -> int:
    return int(varz(server)["cluster"]["cluster_port"])


async def _drain(sub: nats.aio.subscription.Subscription) -> list[nats.aio.msg.Msg]:
    out = []
    while sub.pending_msgs:
        out.append(await sub.next_msg(timeout=1))
    return out


async def _until(sub: nats.aio.subscription.Subscription, last: str) -> list[str]:
    """Subjects received up to (without) `last`."""
    out = []
    while (msg := await sub.next_msg(timeout=5)).subject != last:
        out.append(msg.subject)
    return out
