"""Fresh three-node clusters, one after another: every node answers JetStream INFO soon.

A start once left one node of a fresh cluster not answering ``$JS.API.INFO``
for 90 s while the other two did. It was the client: connected as the node's
routes came up, it was sent the INFO announcing them between its CONNECT and
its first PONG, and nats.py, reading one line for that PONG, stayed
unconnected and sent nothing (about one start in 20 on a loaded machine).
So clusters are started one after another, each in new namespaces with new
stores (the accounts of a user's configuration, see cluster.py), and each node
is asked alone, through a client logged in to ``APP``, until it answers; the
slowest answer per node is printed and held to ``INFO_DEADLINE`` from the start
of the processes (a start takes 3-10 s at load averages of 2-7). A node that
misses it is shown with its routes, clients, sockets and Raft state. The
default run starts a few clusters; the soak run (``pytest -m soak``)
``JEPSEN_STARTS`` of them (20 unless told).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from tests.conftest import KIND_IDS
from tests.jepsen.cluster import LOGIN, NodeSet, start_nodes
from tests.jscluster.support import http_json
from tests.support.netns import leftovers, netlab
from tests.support.servers import enabled_kinds

NODES = 3
INFO_DEADLINE = 30.0
ASK_TIMEOUT = 0.5
DEFAULT_STARTS = 3

kinds = pytest.mark.parametrize("kind", enabled_kinds(), ids=lambda k: KIND_IDS[k])


async def answered(url: str, started: float, nodes: NodeSet) -> float:
    """Seconds from ``started`` until the node at ``url``, asked alone, answers INFO."""
    deadline = started + INFO_DEADLINE
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2, **LOGIN)
    try:
        while True:
            try:
                await nc.request("$JS.API.INFO", b"", timeout=ASK_TIMEOUT)
                return time.monotonic() - started
            except (NatsTimeoutError, NoRespondersError):
                if time.monotonic() > deadline:
                    show(nodes)  # with this client still connected: its interest shows
                    raise AssertionError(f"{url}: no JS INFO in {INFO_DEADLINE}s") from None
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


def show(nodes: NodeSet) -> None:
    """Each node's log and its view of routes, interest and Raft, for the test's report."""
    for i, server in enumerate(nodes.servers):
        print(f"----- {server}: {server.log()}")
        sockets = subprocess.run([*nodes.lab.wrapper(i), "ss", "-tnoi"], capture_output=True)
        print(f"----- {server} ss: {sockets.stdout.decode()}")
        for page in ("/routez?subs=1", "/connz?subs=1", "/raftz", "/jsz"):
            print(f"----- {server} {page}: {json.dumps(http_json(server, page))}")


async def one_start(kind: str, tmp_path: Path) -> list[float]:
    """Start one fresh cluster and return each node's seconds to its first INFO answer."""
    with netlab(NODES) as lab:
        started = time.monotonic()
        nodes: NodeSet = await asyncio.to_thread(start_nodes, kind, lab, tmp_path)
        try:
            took = await asyncio.gather(*(answered(u, started, nodes) for u in nodes.urls))
        finally:
            nodes.stop()
    assert leftovers([lab]) == [], "namespaces or links outlived the lab"
    return list(took)


async def starts(kind: str, count: int, tmp_path: Path) -> None:
    slowest = [0.0] * NODES
    for i in range(count):
        took = await one_start(kind, tmp_path / f"start-{i}")
        slowest = [max(a, b) for a, b in zip(slowest, took, strict=True)]
        print(f"{kind} start {i}: JS INFO answered after " + ", ".join(f"{t:.2f}s" for t in took))
    print(f"{kind}: {count} starts, slowest per node " + ", ".join(f"{t:.2f}s" for t in slowest))


@kinds
@pytest.mark.timeout(300)
async def test_fresh_clusters_answer_info_on_every_node(kind: str, tmp_path: Path) -> None:
    await starts(kind, DEFAULT_STARTS, tmp_path)


@kinds
@pytest.mark.soak
@pytest.mark.timeout(1800)
async def test_soak_fresh_clusters_answer_info_on_every_node(kind: str, tmp_path: Path) -> None:
    await starts(kind, int(os.environ.get("JEPSEN_STARTS", "20")), tmp_path)
