"""MQTT in named accounts on a three-server JetStream cluster, against both servers: a
persistent session made in one account on one server gets, on another server, what was
published at QoS 1 on a third while it was away; the other account sees none of it. An
MQTT client counts in its account's `max_connections` on every server of the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from ingest.parser import mqtt
from tests.jscluster.support import start_js_cluster, stop
from tests.mqtt.conftest import CLUSTER_DEADLINE, MQTTServer, RawMQTT, connected, on
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

ACCOUNTS = """
accounts {
  APP { jetstream: enabled, users: [{user: app, password: pw}] }
  OTHER { jetstream: enabled, users: [{user: other, password: pw}] }
  LIM { jetstream: enabled, limits: { max_connections: 1 }, users: [{user: lim, password: pw}] }
  SYS { users: [{user: sys, password: pw}] }
}
system_account: SYS
mqtt { port: -1 }
"""


@pytest.fixture
def cluster(server_kind: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    servers = start_js_cluster(server_kind, tmp_path, config=ACCOUNTS)
    yield servers
    stop(servers)


@pytest.mark.soak  # three servers of each kind (about 30 s for jetlake's)
async def test_a_session_moves_between_servers_inside_its_account(
    cluster: list[ServerProcess],
) -> None:
    a, b, c = (on(server) for server in cluster)
    app = {"username": "app", "password": "pw"}
    other = {"username": "other", "password": "pw"}
    device = await connected(a, "dev", clean_session=False, **app)
    await device.subscribe("plant/+/temp", qos=1)
    await device.__aexit__(None, None, None)
    stranger = await connected(b, "dev", clean_session=False, **other)  # same id, OTHER
    await stranger.subscribe("plant/+/temp", qos=1)

    publisher = await connected(b, "pub", **app)
    await publisher.publish("plant/1/temp", b"21.5", qos=1)
    await publisher.publish("plant/done", b"", qos=1)
    await publisher.__aexit__(None, None, None)

    back = await connected(c, "dev", clean_session=False, **app)
    msg = await asyncio.wait_for(anext(aiter(back.messages)), CLUSTER_DEADLINE)
    assert (msg.topic.value, msg.payload, msg.qos) == ("plant/1/temp", b"21.5", 1)
    await back.__aexit__(None, None, None)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(aiter(stranger.messages)), 0.5)
    await stranger.__aexit__(None, None, None)

    nc = await nats.connect(cluster[1].url, user="app", password="pw")
    try:
        info = await nc.jetstream().stream_info("$MQTT_msgs")
        assert info.config.num_replicas == 3  # the cluster's size, as in the global account
    finally:
        await nc.close()


@pytest.mark.soak  # three servers of each kind
async def test_an_mqtt_client_fills_its_account_on_every_server(
    cluster: list[ServerProcess],
) -> None:
    device = await _device(on(cluster[0]))
    try:

        async def refused() -> bool:
            try:
                nc = await nats.connect(
                    cluster[1].url, user="lim", password="pw", allow_reconnect=False
                )
            except nats.errors.Error as exc:
                assert "maximum account active connections exceeded" in str(exc)
                return True
            await nc.close()
            return False

        # The count reaches the other servers with the account's event.
        await poll_async(
            refused, "the device counted on the second server", CLUSTER_DEADLINE, interval=0.1
        )
    finally:
        device.close()


async def _device(server: MQTTServer) -> RawMQTT:
    """A raw client, connected once the new cluster can make the account's MQTT streams.
    It waits as long as that takes (a client library's attempt that timed out would hold
    the account's one place) and tries again when the server gave up (no meta leader)."""
    deadline = asyncio.get_running_loop().time() + CLUSTER_DEADLINE
    while True:
        device = await RawMQTT.open(server)
        device.send(mqtt.Connect("lim-dev", True, 0, None, "lim", b"pw"))
        left = deadline - asyncio.get_running_loop().time()
        connack = await asyncio.wait_for(device.reader.read(4), max(left, 0.1))
        if connack:
            assert connack == mqtt.encode(mqtt.ConnAck(False, mqtt.ACCEPTED))
            return device
        device.close()
        assert asyncio.get_running_loop().time() < deadline, "MQTT never came up"
        await asyncio.sleep(0.1)
