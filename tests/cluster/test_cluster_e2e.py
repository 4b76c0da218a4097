"""Cluster formation and failure cases, the reference and jetlake side by side.

Every scenario starts its own servers (they change state: kills, lame duck,
refused peers) and waits on log lines or polls /routez with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal

import nats
import pytest

from tests.conftest import MakeServer
from tests.support.cluster import (
    ONE_ROUTE_PER_PEER,
    cluster_args,
    free_port,
    has_route_interest,
    peers,
    route_url,
    routez,
    varz,
    wait_mesh,
)
from tests.support.poll import poll
from tests.support.raw import Outcome, RawClient

pytestmark = pytest.mark.timeout(60)


def test_cluster_name_mismatch_is_refused(make_server: MakeServer) -> None:
    port = free_port()
    a = make_server(*cluster_args("A", port, [], cluster="C"))
    b = make_server(*cluster_args("B", free_port(), [port], cluster="D"))
    refusal = 'Rejecting connection, cluster name "D" does not match "C"'
    a.wait_for_log(re.escape(refusal))
    a.wait_for_log("Router connection closed: Cluster Name Conflict")
    b.wait_for_log(re.escape(f"Route Error '{refusal}'"))
    assert routez(a)["num_routes"] == 0


def test_duplicate_server_name_is_refused(make_server: MakeServer) -> None:
    port = free_port()
    a = make_server(*cluster_args("TWIN", port, []))
    make_server(*cluster_args("TWIN", free_port(), [port]))
    a.wait_for_log(re.escape('Remote server has a duplicate name: "TWIN"'))
    a.wait_for_log("Router connection closed: Duplicate Server Name")
    assert routez(a)["num_routes"] == 0


def test_route_authorization(make_server: MakeServer) -> None:
    """Credentials live in the file: `--cluster URL` would replace them with the URL's."""
    port = free_port()
    auth = (
        f"server_name: A\ncluster {{ name: C, listen: 127.0.0.1:{port}, pool_size: -1\n"
        "  authorization { user: ru, password: rp, timeout: 2 } }"
    )
    a = make_server("-m", "-1", config=auth)
    b = make_server(
        "-m", "-1", "-n", "B", "--cluster", route_url(free_port()), "--cluster_name", "C",
        "--routes", route_url(port, "ru:rp"), config=ONE_ROUTE_PER_PEER,
    )  # fmt: skip
    wait_mesh([a, b], ["A", "B"])
    make_server(
        "-m", "-1", "-n", "X", "--cluster", route_url(free_port()), "--cluster_name", "C",
        "--routes", route_url(port, "ru:wrong"), config=ONE_ROUTE_PER_PEER,
    )  # fmt: skip
    a.wait_for_log("Router connection closed: Authentication Failure")
    assert peers(a) == {"B"}


def test_explicit_route_is_retried_until_the_peer_comes(make_server: MakeServer) -> None:
    port = free_port()
    b = make_server(*cluster_args("B", free_port(), [port]))
    b.wait_for_log(r"Error trying to connect to route \(attempt 1\)")
    a = make_server(*cluster_args("A", port, []))
    wait_mesh([a, b], ["A", "B"])


def test_servers_dialling_each_other_keep_one_route(make_server: MakeServer) -> None:
    pa, pb = free_port(), free_port()
    a = make_server(*cluster_args("A", pa, [pb]), config=ONE_ROUTE_PER_PEER)
    b = make_server(*cluster_args("B", pb, [pa]), config=ONE_ROUTE_PER_PEER)
    wait_mesh([a, b], ["A", "B"])
    for server in (a, b):
        poll(lambda s=server: routez(s)["num_routes"] == 1, "one route between A and B")


def test_every_server_listing_every_route_including_itself(make_server: MakeServer) -> None:
    """The usual production config: one routes list, the same on every server."""
    ports = [free_port() for _ in range(3)]
    servers = [
        make_server(*cluster_args(f"S{i}", port, ports), config=ONE_ROUTE_PER_PEER)
        for i, port in enumerate(ports)
    ]
    wait_mesh(servers, ["S0", "S1", "S2"])
    for server in servers:
        poll(lambda s=server: routez(s)["num_routes"] == 2, "one route per peer")


async def test_clients_hear_of_a_new_server(make_server: MakeServer) -> None:
    """An async INFO with connect_urls reaches clients when a server joins."""
    port = free_port()
    a = make_server(*cluster_args("A", port, []), config=ONE_ROUTE_PER_PEER)
    found = asyncio.Event()

    async def discovered() -> None:
        found.set()

    nc = await nats.connect(a.url, discovered_server_cb=discovered, allow_reconnect=False)
    try:
        b = make_server(*cluster_args("B", free_port(), [port]), config=ONE_ROUTE_PER_PEER)
        await asyncio.wait_for(found.wait(), 10)
        assert b.port in {u.port for u in nc.servers}
    finally:
        await nc.close()


async def test_a_new_server_is_told_only_after_the_first_pong(make_server: MakeServer) -> None:
    """A client between its CONNECT and its first PONG is sent no async INFO: nats.py reads
    one line after CONNECT + PING and, when it is not the PONG, stays unconnected and sends
    nothing (one fresh cluster start in ~20 left a client so, see tests/jepsen). The INFO
    after that PONG names the new server."""
    port = free_port()
    a = make_server(*cluster_args("A", port, []), config=ONE_ROUTE_PER_PEER)
    raw = await RawClient.connect("127.0.0.1", a.port)
    try:
        await raw.send(f"CONNECT {json.dumps({'protocol': 1, 'verbose': False})}\r\n")
        b = make_server(*cluster_args("B", free_port(), [port]), config=ONE_ROUTE_PER_PEER)
        poll(lambda: peers(a) == {"B"}, "A routed to B")
        await raw.send("PING\r\n")
        assert (await raw.read_op())[0] == b"PONG"
        assert raw.infos == []
        assert await raw.outcome() == Outcome((), closed=False)  # the INFO came meanwhile
        assert [f"127.0.0.1:{b.port}" in info["connect_urls"] for info in raw.infos] == [True]
    finally:
        await raw.close()


def test_no_advertise_keeps_connect_urls_from_clients(make_server: MakeServer) -> None:
    """A peer that does not advertise leaves nothing to tell: no connect_urls at all."""
    port = free_port()
    a = make_server(*cluster_args("A", port, []), "--no_advertise", config=ONE_ROUTE_PER_PEER)
    b = make_server(*cluster_args("B", free_port(), [port]), config=ONE_ROUTE_PER_PEER)
    wait_mesh([a, b], ["A", "B"])
    assert "connect_urls" not in varz(b)
    assert "connect_urls" not in varz(a)  # A hears of B but does not advertise


def test_lame_duck_server_leaves_the_connect_urls(make_server: MakeServer) -> None:
    seed = free_port()
    servers = [make_server(*cluster_args("S0", seed, []), config=ONE_ROUTE_PER_PEER)]
    for name in ("S1", "S2"):
        servers.append(
            make_server(*cluster_args(name, free_port(), [seed]), config=ONE_ROUTE_PER_PEER)
        )
    wait_mesh(servers, ["S0", "S1", "S2"])
    s1 = servers[1]
    everyone = sorted(f"127.0.0.1:{s.port}" for s in servers)
    poll(lambda: sorted(varz(s1).get("connect_urls", [])) == everyone, "all URLs advertised")
    servers[0].send_signal(signal.SIGUSR2)
    rest = everyone[:]
    rest.remove(f"127.0.0.1:{servers[0].port}")
    poll(
        lambda: sorted(varz(s1).get("connect_urls", [])) == rest,
        "the lame-duck server's URL withdrawn",
    )


async def test_client_fails_over_and_keeps_its_subscription(make_server: MakeServer) -> None:
    """kill -9 the client's server: it reconnects to a discovered one and still receives."""
    seed = free_port()
    servers = [make_server(*cluster_args("S0", seed, []), config=ONE_ROUTE_PER_PEER)]
    for name in ("S1", "S2"):
        servers.append(
            make_server(*cluster_args(name, free_port(), [seed]), config=ONE_ROUTE_PER_PEER)
        )
    await asyncio.to_thread(wait_mesh, servers, ["S0", "S1", "S2"])
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    sub_nc = await nats.connect(
        servers[0].url, reconnected_cb=on_reconnect, reconnect_time_wait=0.1
    )
    pub_nc = await nats.connect(servers[2].url, allow_reconnect=False)
    try:
        assert {u.port for u in sub_nc.servers} == {s.port for s in servers}
        sub = await sub_nc.subscribe("fo.x")
        await sub_nc.flush()
        await asyncio.to_thread(poll, lambda: has_route_interest(servers[2], "fo.x"), "fo.x")
        await pub_nc.publish("fo.x", b"before")
        assert (await sub.next_msg(timeout=5)).data == b"before"
        await asyncio.to_thread(servers[0].kill)
        await asyncio.wait_for(reconnected.wait(), 15)
        await sub_nc.flush()
        if sub_nc.connected_url is not None and sub_nc.connected_url.port != servers[2].port:
            await asyncio.to_thread(
                poll, lambda: has_route_interest(servers[2], "fo.x"), "fo.x after failover"
            )
        await pub_nc.publish("fo.x", b"after")
        assert (await sub.next_msg(timeout=5)).data == b"after"
    finally:
        await sub_nc.close()
        await pub_nc.close()
