"""The edge-to-lake path as one deployment: an MQTT device and a NATS publisher at an edge
server (JetStream domain `edge`), a leafnode link from it to a three-server hub cluster
(domain `hub`), an R3 hub stream that sources the edge's stream through `$JS.edge.API`,
and the lake on at the hub. The Delta table of the hub stream ends with every message
the edge acknowledged, each once.

The uplink runs through one relay per hub server (`tests.leafnode.relay`); cutting
them all is the edge losing its network: every link connection aborted, every redial
refused. The hub does not advertise its leafnode ports, so the edge cannot go around
the relays. The hub servers start no compactor (`compact_interval: 0`); the test
compacts the leader's store in-process on the session's Spark, as the other lake tests
do, and reads the table with delta-rs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import nats
import pytest
from deltalake import DeltaTable
from nats.js.api import ExternalStream, StreamConfig, StreamSource
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor
from log.compactor.layout import STREAMS, StreamRef
from log.compactor.location import Lake
from log.segments import list_segments
from tests.jscluster.support import connect, eventually, leader_of, start_js_cluster, stop
from tests.lake.conftest import DEADLINE
from tests.lake.test_lake_cluster_e2e import store_of
from tests.leafnode.conftest import LINK_TIMEOUT, leaf_port, linked
from tests.leafnode.relay import Relay
from tests.mqtt.conftest import mqtt_port
from tests.support.cluster import free_port
from tests.support.poll import poll, poll_async
from tests.support.servers import ServerProcess, start_server

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 10.0


def hub_config(lake_dir: Path) -> str:
    """Each hub server's config beyond its routes and store (`docs/leafnodes.md`)."""
    return (
        "jetstream { domain: hub }\n"
        'leafnodes { listen: "127.0.0.1:-1", no_advertise: true }\n'
        f'lake {{ dir: "{lake_dir}", seal_interval: "200ms", compact_interval: 0 }}\n'
    )


def edge_config(store: Path, hub_ports: list[int]) -> str:
    urls = ", ".join(f'"nats://127.0.0.1:{port}"' for port in hub_ports)
    return (
        f'server_name: edge\njetstream {{ store_dir: "{store}", domain: edge }}\n'
        "mqtt { port: -1 }\n"
        f'leafnodes {{ reconnect: "250ms"\n  remotes [ {{ urls: [ {urls} ] }} ] }}\n'
    )


@dataclass
class EdgeToLake:
    hubs: list[ServerProcess]
    edge: ServerProcess
    relays: list[Relay]
    lake: Lake

    async def cut(self, *, silently: bool) -> None:
        for relay in self.relays:
            await relay.cut(silently=silently)

    async def restore(self) -> None:
        for relay in self.relays:
            await relay.start()


@pytest.fixture(
    params=[
        pytest.param("jetlake", id="jl-edge"),
        pytest.param("nats-server", id="ref-edge", marks=pytest.mark.soak),
    ]
)
async def path(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EdgeToLake]:
    """The hub cluster (jetlake: the lake is the point) and an edge of the given kind."""
    folder = tmp_path / "lake"
    hubs = await asyncio.to_thread(start_js_cluster, "jetlake", tmp_path, config=hub_config(folder))
    relays: list[Relay] = []
    edge = None
    try:
        for hub in hubs:
            relays.append(Relay(free_port(), leaf_port(hub)))
            await relays[-1].start()
        config = edge_config(tmp_path / "edge", [relay.port for relay in relays])
        edge = await asyncio.to_thread(
            start_server, request.param, "-m", "-1", config=config, tmp_path=tmp_path, name="edge"
        )
        await asyncio.to_thread(poll_link, edge, True)
        yield EdgeToLake(hubs, edge, relays, Lake.at(folder))
    finally:
        for relay in relays:
            with contextlib.suppress(AssertionError):
                await relay.cut()
        if edge is not None:
            edge.stop(expect_code=None)
        stop(hubs)


def poll_link(edge: ServerProcess, up: bool) -> None:
    poll(lambda: linked(edge) == up, f"the uplink {'up' if up else 'down'}", LINK_TIMEOUT)


class Devices:
    """The edge's two publishers: each message's payload names it (`m<i>` from MQTT QoS 1,
    `n<i>` from NATS); `sent` is every payload the edge acknowledged."""

    def __init__(self, edge: ServerProcess) -> None:
        self.edge = edge
        self.sent: list[bytes] = []
        self._count = 0
        self._open = contextlib.AsyncExitStack()

    async def connect(self) -> None:
        port = mqtt_port(self.edge)
        client = aiomqtt.Client("127.0.0.1", port, identifier="device-1", timeout=5)
        self.mqtt = await self._open.enter_async_context(client)
        nc = await nats.connect(self.edge.url, allow_reconnect=False)
        self._open.push_async_callback(nc.close)
        self.js = nc.jetstream()

    async def close(self) -> None:
        await self._open.aclose()

    async def publish(self, count: int) -> None:
        for _ in range(count):
            i = self._count
            self._count += 1
            await self.mqtt.publish(f"plant/line{i % 3}/temp", b"m%d" % i, qos=1)
            self.sent.append(b"m%d" % i)
            await self.js.publish(f"orders.{i % 5}", b"n%d" % i, timeout=TIMEOUT)
            self.sent.append(b"n%d" % i)

    async def crash_edge(self) -> None:
        """SIGKILL the edge and start it again: what it acknowledged is on its disk."""
        self.edge.kill()
        with contextlib.suppress(aiomqtt.MqttError):
            await self.close()
        self._open = contextlib.AsyncExitStack()
        await asyncio.to_thread(self.edge.start, port=self.edge.port)
        await self.connect()


async def edge_to_lake(
    path: EdgeToLake,
    spark: SparkSession,
    *,
    batch: int,
    cut_for: float,
    silently: bool = False,
    failover: bool = False,
    crash: bool = False,
) -> None:
    """Publish `batch` from each device, then, if `cut_for`, cut the uplink for that long
    (`silently`: the hub's end left open, as a network that went away; `failover`: the
    hub stream's leader killed meanwhile; `crash`: the edge killed and restarted
    meanwhile) under publish load and restore it; then compact the hub and compare its
    Delta table."""
    hub_nc = await connect(path.hubs)
    hub_js = hub_nc.jetstream(timeout=TIMEOUT)
    devices = Devices(path.edge)
    await devices.connect()
    await devices.js.add_stream(name="EDGE", subjects=["plant.>", "orders.>"])
    source = StreamSource(name="EDGE", external=ExternalStream(api="$JS.edge.API"))
    config = StreamConfig(name="HUB", sources=[source], num_replicas=3)
    await eventually(lambda: hub_js.add_stream(config), "the hub's R3 stream created")

    async def hub_has(count: int) -> None:
        """Wait while the hub stream grows toward `count`; fail once it stalls."""
        held, stalled_at = -1, time.monotonic() + TIMEOUT
        while held < count:
            with contextlib.suppress(nats.errors.Error):  # an election after a kill
                now = (await hub_js.stream_info("HUB")).state.messages
                if now > held:
                    held, stalled_at = now, time.monotonic() + TIMEOUT
            assert time.monotonic() < stalled_at, f"the hub stream stalled at {held} of {count}"
            await asyncio.sleep(0.1)

    restored = time.monotonic()
    try:
        await devices.publish(batch)
        if cut_for:
            await hub_has(len(devices.sent))
            await path.cut(silently=silently)
            await asyncio.to_thread(poll_link, path.edge, False)
            cut_until = time.monotonic() + cut_for
            if failover:
                leader_of(await hub_js.stream_info("HUB"), path.hubs).kill()
            if crash:
                await devices.publish(batch)
                await devices.crash_edge()
            while time.monotonic() < cut_until:  # the edge acknowledges alone meanwhile
                await devices.publish(batch)
            await path.restore()
            restored = time.monotonic()
            await devices.publish(batch)
    finally:
        await devices.close()
    sent = devices.sent
    await hub_has(len(sent))
    info = await hub_js.stream_info("HUB")
    took = time.monotonic() - restored
    print(f"{len(sent)} messages from the edge in the hub's stream {took:.1f}s after the cut")
    assert info.state.messages == len(sent)  # none doubled in the hub stream
    leader = leader_of(info, path.hubs)
    stream_dir = store_of(leader) / STREAMS / "HUB"
    await poll_async(
        lambda: any(s.sealed and s.last_seq >= len(sent) for s in list_segments(stream_dir)),
        "the hub leader sealing every message",
        timeout=DEADLINE,
    )
    summary = Compactor(spark, store_of(leader), path.lake).run_once()
    assert not summary.errors, summary.errors
    table = StreamRef.load(stream_dir).table_path(path.lake)
    rows = DeltaTable(table.uri, storage_options=table.delta_options).to_pyarrow_table()
    in_lake = Counter(rows.column("data").to_pylist())
    assert in_lake == Counter(sent), "the lake differs from what the edge acknowledged"
    assert sorted(rows.column("seq").to_pylist()) == list(range(1, len(sent) + 1))
    await hub_nc.close()


async def test_edge_messages_reach_the_hub_lake(path: EdgeToLake, spark: SparkSession) -> None:
    await edge_to_lake(path, spark, batch=20, cut_for=0)


@pytest.mark.soak
@pytest.mark.parametrize(
    ("silently", "failover", "crash"),
    [(False, False, False), (True, False, False), (False, True, False), (False, False, True)],
    ids=["aborted", "silent", "aborted-leader-killed", "aborted-edge-crashed"],
)
async def test_a_cut_uplink_leaves_the_hub_lake_exact(
    path: EdgeToLake,
    spark: SparkSession,
    silently: bool,
    failover: bool,
    crash: bool,
) -> None:
    await edge_to_lake(
        path, spark, batch=25, cut_for=30.0, silently=silently, failover=failover, crash=crash
    )
