"""A leaf of a two-server hub cluster reaches clients of the server it is not linked to,
and they reach it: the hub passes its cluster's interest to the leaf, and the leaf's
to its cluster."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest

from tests.leafnode.conftest import (
    LINK_TIMEOUT,
    hub_config,
    knows,
    leaf_config,
    leaf_port,
    leafz,
    linked,
)
from tests.support.clients import crossed
from tests.support.cluster import ONE_ROUTE_PER_PEER, free_port, start_cluster, stop_all, wait_mesh
from tests.support.poll import poll, poll_async
from tests.support.servers import ServerProcess, start_server


@dataclass
class HubCluster:
    servers: list[ServerProcess]  # S0 (the leaf's) and S1
    leaf: ServerProcess


def leafnode_urls(port: int) -> set[str]:
    """The `leafnode_urls` of the INFO a leafnode port greets with."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        line = sock.makefile("rb").readline()
    return set(json.loads(line.removeprefix(b"INFO "))["leafnode_urls"])


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-leaf"),
        pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-leaf", marks=pytest.mark.soak),
        pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-leaf", marks=pytest.mark.soak),
    ],
)
def hub_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubCluster]:
    hub_kind, leaf_kind = request.param
    tmp = tmp_path_factory.mktemp("hubs")
    config = ONE_ROUTE_PER_PEER + "leafnodes { listen: 127.0.0.1:-1 }\n"
    servers = start_cluster(hub_kind, tmp, 2, config=config)
    leaf = None
    try:
        wait_mesh(servers, ["S0", "S1"])
        config = leaf_config(leaf_port(servers[0]))
        leaf = start_server(leaf_kind, "-m", "-1", config=config, tmp_path=tmp, name="leaf")
        poll(lambda: linked(servers[0]) and linked(leaf), "the link", LINK_TIMEOUT)
        yield HubCluster(servers, leaf)
    finally:
        if leaf is not None:
            leaf.stop(expect_code=None)
        stop_all(servers)


async def test_the_leaf_and_the_far_hub_server_reach_each_other(hub_cluster: HubCluster) -> None:
    far = await nats.connect(hub_cluster.servers[1].url)
    leaf = await nats.connect(hub_cluster.leaf.url)
    at_far = await far.subscribe("far.*")
    at_leaf = await leaf.subscribe("edge.*")
    await far.flush()
    await leaf.flush()
    await knows(hub_cluster.servers[0], "edge.*")  # the leaf's interest on its hub server
    await knows(hub_cluster.leaf, "far.*")  # the far server's interest, passed on
    await leaf.publish("far.x", b"up")
    assert (await at_far.next_msg(5)).data == b"up"
    await poll_async(
        lambda: crossed(far, "edge.y", at_leaf, b"down", 0.5),
        "the leaf's interest on the far server, over its route",
        LINK_TIMEOUT,
    )
    await at_far.unsubscribe()
    await far.flush()
    await knows(hub_cluster.leaf, "far.*", present=False)
    await far.close()
    await leaf.close()


def test_the_hub_tells_leafs_every_server_that_takes_them(hub_cluster: HubCluster) -> None:
    want = {f"127.0.0.1:{leaf_port(server)}" for server in hub_cluster.servers}
    for server in hub_cluster.servers:
        port = leaf_port(server)
        poll(lambda p=port: leafnode_urls(p) == want, "both leafnode URLs", LINK_TIMEOUT)


@pytest.mark.parametrize(
    ("hub_kind", "edge_kind"),
    [
        ("nats-server", "jetlake"),
        pytest.param("jetlake", "jetlake", marks=pytest.mark.soak),
        pytest.param("nats-server", "nats-server", marks=pytest.mark.soak),
    ],
    ids=["ref-hub/jl-edges", "jl-hub/jl-edges", "ref-hub/ref-edges"],
)
async def test_an_edge_cluster_gets_each_hub_message_once_per_subscriber(
    tmp_path: Path, hub_kind: str, edge_kind: str
) -> None:
    """Two edge servers in one cluster, each a leaf of the hub: the hub sends each its
    own copy, which stays off the edge cluster's routes."""
    port = free_port()
    hub = start_server(hub_kind, "-m", "-1", config=hub_config(port), tmp_path=tmp_path)
    config = ONE_ROUTE_PER_PEER + leaf_config(port).replace("server_name: leaf\n", "")
    edges = start_cluster(edge_kind, tmp_path, 2, config=config)
    try:
        wait_mesh(edges, ["S0", "S1"])
        poll(lambda: leafz(hub)["leafnodes"] == 2, "both edges linked", LINK_TIMEOUT)
        hub_nc = await nats.connect(hub.url)
        subs = []
        for edge in edges:
            nc = await nats.connect(edge.url)
            subs.append((nc, await nc.subscribe("fan.out"), await nc.subscribe("fan.fence")))
            await nc.flush()
        both = lambda: all(  # noqa: E731
            {"fan.out", "fan.fence"} <= set(leaf.get("subscriptions_list", []))
            for leaf in leafz(hub)["leafs"]
        )
        await asyncio.to_thread(poll, both, "both edges' interest", LINK_TIMEOUT)
        for i in range(10):
            await hub_nc.publish("fan.out", str(i).encode())
        await hub_nc.publish("fan.fence", b"")
        for nc, sub, fence in subs:
            await fence.next_msg(5)
            await nc.flush()
            got = [int((await sub.next_msg(1)).data) for _ in range(sub.pending_msgs)]
            assert got == list(range(10))
            await nc.close()
        await hub_nc.close()
    finally:
        stop_all(edges)
        hub.stop(expect_code=None)
