"""The namespace lab: clients reach every node; a partition drops packets between nodes only.

Two servers routed to each other, each in its own namespace. A cut must stall
the established route (messages stop crossing it, yet neither side sees it
closed: no reset came back) and refuse new connections between the two, while
the test process keeps its connections to both. Healing lets traffic flow on
the same route again.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.jepsen.cluster import CLUSTER_PORT, LOGIN, NodeSet, start_nodes
from tests.support.cluster import peers
from tests.support.netns import NetLab, NetnsError, ip, leftovers, netlab
from tests.support.poll import poll, poll_async

pytestmark = pytest.mark.timeout(60)
DELIVERY_WAIT = 1.0


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[NodeSet]:
    with netlab(2) as lab:
        nodes = start_nodes("nats-server", lab, tmp_path)
        try:
            yield nodes
        finally:
            nodes.stop()
    assert leftovers([lab]) == [], "namespaces or links outlived the lab"


def _connects(lab: NetLab, src: int, dst: int) -> bool:
    """Can node ``src`` open a TCP connection to node ``dst``'s route port (from inside ``src``)?"""
    probe = (
        "import socket,sys\n"
        f"s=socket.socket(); s.settimeout(1)\n"
        f"sys.exit(0 if s.connect_ex(({lab.addrs[dst]!r}, {CLUSTER_PORT})) == 0 else 1)\n"
    )
    done = subprocess.run([*lab.wrapper(src), sys.executable, "-c", probe], timeout=10)
    return done.returncode == 0


async def _delivered(nc_pub: nats.NATS, sub: nats.aio.subscription.Subscription) -> bool:
    await nc_pub.publish("probe", b"x")
    await nc_pub.flush()
    try:
        await sub.next_msg(DELIVERY_WAIT)
    except nats.errors.TimeoutError:
        return False
    return True


async def test_a_cut_stalls_the_route_and_heal_resumes_it(pair: NodeSet) -> None:
    lab = pair.lab
    poll(lambda: peers(pair.servers[0]) == {"S1"}, "S0 routed to S1")
    near = await nats.connect(pair.urls[0], allow_reconnect=False, **LOGIN)
    far = await nats.connect(pair.urls[1], allow_reconnect=False, **LOGIN)
    try:
        sub = await far.subscribe("probe")
        await far.flush()
        await poll_async(lambda: _delivered(near, sub), "a delivery across the route", 10)

        lab.cut(0, 1)
        assert lab.partitioned
        assert not await _delivered(near, sub), "a message crossed the cut"
        assert not _connects(lab, 0, 1) and not _connects(lab, 1, 0)
        assert peers(pair.servers[0]) == {"S1"}, "the route was closed: packets were refused"
        assert near.is_connected and far.is_connected  # clients are not partitioned

        lab.heal()
        assert not lab.partitioned
        assert _connects(lab, 0, 1) and _connects(lab, 1, 0)
        # TCP retransmits on its own backoff.
        await poll_async(lambda: _delivered(near, sub), "the route resumed after healing", 15)
    finally:
        await asyncio.gather(near.close(), far.close())


def test_without_ip_the_lab_fails_with_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(NetnsError, match="iproute2"):
        ip("netns", "list")
