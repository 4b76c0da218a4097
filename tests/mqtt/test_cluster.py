"""MQTT on a three-server JetStream cluster, against both servers: retained messages and
persistent sessions are kept in replicated streams, so any server serves any client."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import nats
import pytest

from tests.jscluster.support import start_js_cluster, stop
from tests.support.servers import ServerProcess

_MQTT_LISTEN = re.compile(r"Listening for MQTT clients on mqtt://\S+:(\d+)")
DEADLINE = 30.0  # a kill -9 may take the leader of MQTT's streams: elections included


def mqtt_port(server: ServerProcess) -> int:
    found = server.find_log(_MQTT_LISTEN)
    assert found is not None, f"{server.kind} did not log its MQTT port\n{server.log()}"
    return int(found.group(1))


@pytest.fixture
def cluster(server_kind: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    servers = start_js_cluster(server_kind, tmp_path, config="mqtt { port: -1 }\n")
    yield servers
    stop(servers)


async def connected(server: ServerProcess, client_id: str, **options: object) -> aiomqtt.Client:
    """A connected client, retried until the deadline: the first CONNECT to a new cluster
    waits for MQTT's streams, and after a kill -9 for their new leaders."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        client = aiomqtt.Client(
            "127.0.0.1", mqtt_port(server), identifier=client_id, timeout=10, **options
        )
        try:
            await client.__aenter__()
            return client
        except aiomqtt.MqttError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.5)


@pytest.mark.soak  # three servers of each kind, a kill -9 and re-elections: ~35 s a kind
async def test_retained_and_session_move_between_servers(cluster: list[ServerProcess]) -> None:
    """A message retained through A reaches a subscriber on B; a persistent session made
    on A, whose server is then killed, gets on C the QoS 1 and 2 messages sent meanwhile
    (QoS 2 exactly once) and then takes the id over on B; a QoS 0 message crosses from A
    to B."""
    a, b, c = cluster
    publisher = await connected(a, "pub-a")
    nc = await nats.connect(b.url)
    for stream in ("$MQTT_sess", "$MQTT_msgs", "$MQTT_rmsgs"):  # the cluster's size, up to 3
        assert (await nc.jetstream().stream_info(stream)).config.num_replicas == 3
    await nc.close()
    await publisher.publish("edge/status", b"online", qos=1, retain=True)

    reader = await connected(b, "reader-b")
    await reader.subscribe("edge/#", qos=1)
    msg = await asyncio.wait_for(anext(aiter(reader.messages)), DEADLINE)
    assert (msg.topic.value, msg.payload, msg.retain) == ("edge/status", b"online", True)
    await publisher.publish("edge/live", b"qos0 across servers", qos=0)
    msg = await asyncio.wait_for(anext(aiter(reader.messages)), DEADLINE)
    assert (msg.topic.value, msg.payload, msg.qos) == ("edge/live", b"qos0 across servers", 0)
    await reader.__aexit__(None, None, None)

    device = await connected(a, "device-1", clean_session=False)
    await device.subscribe("cmd/device-1", qos=2)
    await device.__aexit__(None, None, None)
    await publisher.__aexit__(None, None, None)
    a.kill()  # -9: the session's server is gone

    sender = await connected(b, "sender-b")
    for i in range(6):
        await sender.publish("cmd/device-1", b"%d" % i, qos=1 + i % 2)
    await sender.__aexit__(None, None, None)

    device = await connected(c, "device-1", clean_session=False)
    got: list[tuple[bytes, int]] = []
    async with asyncio.timeout(DEADLINE):
        async for msg in device.messages:
            got.append((msg.payload, msg.qos))
            if len({payload for payload, _ in got}) == 6:
                break
    assert {(b"%d" % i, 1 + i % 2) for i in range(6)} == set(got)
    assert len([q for _, q in got if q == 2]) == 3  # QoS 2: exactly once

    taker = await connected(b, "device-1", clean_session=False)  # the id moves to B: C lets go
    with pytest.raises(aiomqtt.MqttError):
        async with asyncio.timeout(DEADLINE):
            async for _ in device.messages:
                pass
    await taker.__aexit__(None, None, None)
