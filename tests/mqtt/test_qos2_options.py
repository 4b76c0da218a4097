"""`mqtt { reject_qos2_publish, downgrade_qos2_subscribe, consumer_replicas }` on both
servers: a QoS 2 PUBLISH closes the client and a QoS 2 Will gets CONNACK 0x10, a QoS 2
subscription is granted QoS 1 with the reference's warning, and `consumer_replicas` is
accepted with the reference's warning; a QoS 2 message retained before the server was
told to reject QoS 2 is not delivered at QoS 2. `js_domain` is a documented difference: jetlake
refuses it rather than ignore it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from ingest.parser import mqtt
from tests.conftest import MakeServer, ServerPool
from tests.mqtt.conftest import TIMEOUT, MQTTServer, RawMQTT, mqtt_port, next_message
from tests.support.servers import ServerError, ServerProcess, server_command

CONFIG = """
jetstream {{ store_dir: "{store}" }}
mqtt {{
  port: -1
  reject_qos2_publish: true
  downgrade_qos2_subscribe: true
  consumer_replicas: 3
}}
"""


@pytest.fixture
def server(server_kind: str, server_pool: ServerPool, tmp_path_factory: Any) -> MQTTServer:
    store = Path(tmp_path_factory.getbasetemp()) / f"mqtt-qos2-options-{server_kind}"
    process = server_pool.get(server_kind, config=CONFIG.format(store=store))
    return MQTTServer(process, mqtt_port(process))


def test_consumer_replicas_is_ignored_with_a_warning(server: MQTTServer) -> None:
    found = server.process.find_log(
        r':\d+:\d+: invalid use of field "consumer_replicas": '
        "consumer replicas setting ignored in this server version"
    )
    assert found is not None, server.process.log()


async def test_qos2_subscription_is_granted_qos1(server: MQTTServer) -> None:
    async with aiomqtt.Client(
        "127.0.0.1", server.mqtt_port, identifier="down-sub", timeout=TIMEOUT
    ) as sub:
        granted = await sub.subscribe("down/q", qos=2)
        assert [int(g) if isinstance(g, int) else g.value for g in granted] == [1]
        server.process.wait_for_log(
            r'"down-sub" - Downgrading subscription QoS2 to QoS1 for "down.q", as configured',
            timeout=TIMEOUT,
        )
        async with aiomqtt.Client(
            "127.0.0.1", server.mqtt_port, identifier="down-pub", timeout=TIMEOUT
        ) as pub:
            await pub.publish("down/q", b"one", qos=1)
        msg = await next_message(sub)
        assert (msg.payload, msg.qos) == (b"one", 1)


async def test_qos2_publish_closes_the_client(server: MQTTServer) -> None:
    raw = await RawMQTT.open(server)
    try:
        raw.send(mqtt.Connect("no-q2", True, 0))
        assert await raw.packet() == mqtt.ConnAck(False, mqtt.ACCEPTED)
        raw.send(mqtt.Publish(b"up/q", b"x", 1, False, False, 1))
        assert await raw.packet() == mqtt.PubAck(1)  # QoS 1 still goes
        raw.send(mqtt.Publish(b"up/q", b"y", 2, False, False, 2))
        assert await raw.closed()
    finally:
        raw.close()
    server.process.wait_for_log(
        r'"no-q2" - QoS=2 is disabled for PUBLISH messages', timeout=TIMEOUT
    )  # fmt: skip


async def test_qos2_will_is_refused_with_code_0x10(server: MQTTServer) -> None:
    raw = await RawMQTT.open(server)
    try:
        raw.send(mqtt.Connect("will-q2", True, 0, mqtt.Will(b"will/q", b"gone", 2, False)))
        assert await raw.packet() == mqtt.ConnAck(False, 0x10)
        assert await raw.closed()
    finally:
        raw.close()
    server.process.wait_for_log(
        r'"" - server does not accept QoS2 for Will messages', timeout=TIMEOUT
    )  # fmt: skip


async def test_retained_qos2_is_withheld_once_qos2_is_rejected(
    make_server: MakeServer, tmp_path: Path
) -> None:
    process = make_server("-js", "-sd", str(tmp_path / "store"), config="mqtt { port: -1 }\n")
    raw = await RawMQTT.open(MQTTServer(process, mqtt_port(process)))
    try:
        raw.send(mqtt.Connect("ret-put", True, 0))
        assert await raw.packet() == mqtt.ConnAck(False, mqtt.ACCEPTED)
        raw.send(mqtt.Publish(b"ret/q", b"kept", 2, True, False, 3))
        assert await raw.packet() == mqtt.PubRec(3)
        raw.send(mqtt.PubRel(3))
        assert await raw.packet() == mqtt.PubComp(3)
    finally:
        raw.close()
    assert process.config_path is not None
    process.config_path.write_text("mqtt { port: -1, reject_qos2_publish: true }\n")
    process.restart()
    server = MQTTServer(process, mqtt_port(process))
    async with aiomqtt.Client(
        "127.0.0.1", server.mqtt_port, identifier="ret-get", timeout=TIMEOUT
    ) as sub:
        await _withheld_at_qos2(sub, process)
        await sub.subscribe("ret/#", qos=1)  # at QoS 1 it is delivered
        msg = await next_message(sub)
        assert (msg.payload, msg.qos, msg.retain) == (b"kept", 1, True)


async def _withheld_at_qos2(sub: aiomqtt.Client, process: ServerProcess) -> None:
    """Subscribe at QoS 2 until the retained message is withheld, as logged.

    A restarted reference loads its retained messages in the background: a
    subscription made before they arrive finds none to withhold (or send), so it
    subscribes again. jetlake has them at its first subscription.
    """
    withheld = (
        r'"ret-get" - Rejecting retained message with QoS2 for subscription "ret.>", '
        "as configured"
    )
    deadline = time.monotonic() + 30  # its load waits up to 4 s a request, more under load
    patience = TIMEOUT if process.kind == "jetlake" else 2.0
    while True:
        await sub.subscribe("ret/#", qos=2)
        try:
            await process.wait_for_log_async(withheld, patience)
            return
        except ServerError:
            if process.kind == "jetlake" or time.monotonic() > deadline:
                raise


def test_js_domain_is_refused_by_jetlake(tmp_path: Path) -> None:
    conf = tmp_path / "domain.conf"
    conf.write_text('mqtt {\n  port: -1\n  js_domain: "hub"\n}\n')
    argv = [*server_command("jetlake"), "-c", str(conf), "-p", "-1", "-sd", str(tmp_path), "-js"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.returncode == 1
    assert ':3:3: unknown field "js_domain"' in done.stderr
