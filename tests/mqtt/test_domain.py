"""MQTT on a server in a JetStream domain, on both servers: sessions are kept under
`$MQTT.sess.<domain>.`, so a store either server made is read back as it was written,
and a persistent session comes back after a restart."""

from __future__ import annotations

import json
from pathlib import Path

import aiomqtt
import nats

from ingest.parser import mqtt
from tests.conftest import MakeServer
from tests.mqtt.conftest import TIMEOUT, MQTTServer, RawMQTT, mqtt_port

CONFIG = 'jetstream {{ store_dir: "{store}", domain: EDGE }}\nmqtt {{ port: -1 }}\n'


async def test_sessions_live_under_the_domain(make_server: MakeServer, tmp_path: Path) -> None:
    process = make_server(config=CONFIG.format(store=tmp_path / "store"))

    def device() -> aiomqtt.Client:
        return aiomqtt.Client(
            "127.0.0.1", mqtt_port(process), identifier="edge-dev", clean_session=False,
            timeout=TIMEOUT,
        )  # fmt: skip

    async with device() as client:
        await client.subscribe("edge/+/temp", qos=1)
    nc = await nats.connect(process.url)
    try:
        reply = await nc.request(
            "$JS.API.STREAM.INFO.$MQTT_sess", b'{"subjects_filter": ">"}', timeout=TIMEOUT
        )
    finally:
        await nc.close()
    info = json.loads(reply.data)
    assert info["config"]["subjects"] == ["$MQTT.sess.EDGE.>"]
    stored = list(info["state"].get("subjects") or ())
    assert len(stored) == 1 and stored[0].startswith("$MQTT.sess.EDGE."), stored

    process.restart()
    raw = await RawMQTT.open(MQTTServer(process, mqtt_port(process)))
    try:  # the session is found where it was written
        raw.send(mqtt.Connect("edge-dev", False, 0))
        assert await raw.packet() == mqtt.ConnAck(True, mqtt.ACCEPTED)
    finally:
        raw.close()
