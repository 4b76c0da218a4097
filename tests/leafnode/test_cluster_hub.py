"""A leaf of a two-server hub cluster reaches clients of the server it is not linked to,
and they reach it: the hub passes its cluster's interest to the leaf, and the leaf's
to its cluster."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import nats
import pytest

from tests.leafnode.conftest import LINK_TIMEOUT, knows, leaf_config, linked
from tests.support.cluster import ONE_ROUTE_PER_PEER, poll, start_cluster, stop_all, wait_mesh
from tests.support.servers import ServerProcess, start_server

_LEAF_PORT = re.compile(r"Listening for leafnode connections on \S+:(\d+)")


@dataclass
class HubCluster:
    servers: list[ServerProcess]  # S0 (the leaf's) and S1
    leaf: ServerProcess


def leaf_port(server: ServerProcess) -> int:
    found = server.find_log(_LEAF_PORT)
    assert found is not None
    return int(found.group(1))


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
    deadline = asyncio.get_running_loop().time() + LINK_TIMEOUT
    while True:  # the far server learns the leaf's interest over its route
        await far.publish("edge.y", b"down")
        try:
            assert (await at_leaf.next_msg(0.5)).data == b"down"
            break
        except nats.errors.TimeoutError:
            assert asyncio.get_running_loop().time() < deadline
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
