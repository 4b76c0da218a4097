"""MQTT on a three-server JetStream cluster, against both servers: MQTT's streams get the
reference's default replica count, QoS 0 crosses servers, and a client id moves between
servers. What a kill -9 must not lose is tested in test_cluster_faults.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import nats
import pytest

from tests.jscluster.support import start_js_cluster, stop
from tests.mqtt.conftest import CLUSTER_DEADLINE, connected, on
from tests.support.servers import ServerProcess


@pytest.fixture
def cluster(server_kind: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    servers = start_js_cluster(server_kind, tmp_path, config="mqtt { port: -1 }\n")
    yield servers
    stop(servers)


@pytest.mark.soak  # three servers of each kind
async def test_qos0_and_client_ids_move_between_servers(cluster: list[ServerProcess]) -> None:
    """MQTT's streams have three replicas without `stream_replicas`; a QoS 0 message
    crosses from A to B; a persistent session's client id connected on C is taken over
    on B, and C lets go."""
    a, b, c = (on(server) for server in cluster)
    publisher = await connected(a, "pub-a")
    nc = await nats.connect(b.process.url)
    for stream in ("$MQTT_sess", "$MQTT_msgs", "$MQTT_rmsgs"):  # the cluster's size, up to 3
        assert (await nc.jetstream().stream_info(stream)).config.num_replicas == 3
    await nc.close()

    reader = await connected(b, "reader-b")
    await reader.subscribe("edge/#", qos=1)
    await publisher.publish("edge/live", b"qos0 across servers", qos=0)
    msg = await asyncio.wait_for(anext(aiter(reader.messages)), CLUSTER_DEADLINE)
    assert (msg.topic.value, msg.payload, msg.qos) == ("edge/live", b"qos0 across servers", 0)
    await reader.__aexit__(None, None, None)
    await publisher.__aexit__(None, None, None)

    device = await connected(c, "device-1", clean_session=False)
    taker = await connected(b, "device-1", clean_session=False)  # the id moves to B: C lets go
    with pytest.raises(aiomqtt.MqttError):
        async with asyncio.timeout(CLUSTER_DEADLINE):
            async for _ in device.messages:
                pass
    await taker.__aexit__(None, None, None)
