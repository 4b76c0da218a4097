"""Persistent sessions and retained messages across disconnects, restarts and kill -9."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from ingest.parser import mqtt
from tests.conftest import Connect as NatsConnect
from tests.mqtt.conftest import Connect, MQTTServer, RawMQTT, StartMQTT, mqtt_port, next_message
from tests.support.clients import sync

OpenRaw = Callable[[MQTTServer], Awaitable[RawMQTT]]


async def test_session_present_and_offline_messages(
    mqtt_server: MQTTServer, mqtt_client: Connect, open_raw: OpenRaw
) -> None:
    """A persistent session keeps its subscription and QoS 1 messages published while away."""
    first = await open_raw(mqtt_server)
    first.send(mqtt.Connect("keeper", False, 0))
    assert isinstance(await first.packet(), mqtt.ConnAck)
    first.send(mqtt.Subscribe(1, ((b"off/#", 1),)))
    assert await first.packet() == mqtt.SubAck(1, (1,))
    first.send(mqtt.Disconnect())
    assert await first.closed()
    pub = await mqtt_client(identifier="off-pub")
    await pub.publish("off/a", b"while away", qos=1)
    again = await open_raw(mqtt_server)
    again.send(mqtt.Connect("keeper", False, 0))
    assert await again.packet() == mqtt.ConnAck(True, 0)
    msg = await again.packet()
    assert isinstance(msg, mqtt.Publish)
    assert (msg.topic, msg.payload, msg.qos) == (b"off/a", b"while away", 1)
    again.send(mqtt.PubAck(msg.packet_id))
    clean = await open_raw(mqtt_server)  # a clean session replaces it: nothing is present
    clean.send(mqtt.Connect("keeper", True, 0))
    assert await clean.packet() == mqtt.ConnAck(False, 0)


@pytest.mark.parametrize("how", ["kill", "stop"])
async def test_sessions_and_retained_survive_a_restart(
    start_mqtt: StartMQTT, open_raw: OpenRaw, mqtt_client: Connect, how: str
) -> None:
    server = start_mqtt()
    pub = await mqtt_client(server, identifier="rs-pub")
    await pub.publish("rs/kept", b"retained", qos=1, retain=True)
    sub = await open_raw(server)
    sub.send(mqtt.Connect("rs-sub", False, 0))
    assert await sub.packet() == mqtt.ConnAck(False, 0)
    sub.send(mqtt.Subscribe(1, ((b"rs/live/+", 1),)))
    assert await sub.packet() == mqtt.SubAck(1, (1,))
    sub.send(mqtt.Disconnect())
    assert await sub.closed()
    await pub.publish("rs/live/1", b"queued", qos=1)
    await pub.__aexit__(None, None, None)
    if how == "kill":
        server.process.kill()
    else:
        server.process.stop()
    server.process.start()
    server.mqtt_port = mqtt_port(server.process)
    back = await open_raw(server)
    back.send(mqtt.Connect("rs-sub", False, 0))
    assert await back.packet() == mqtt.ConnAck(True, 0)
    msg = await back.packet()
    assert isinstance(msg, mqtt.Publish)
    assert (msg.topic, msg.payload) == (b"rs/live/1", b"queued")
    back.send(mqtt.PubAck(msg.packet_id))
    fresh = await mqtt_client(server, identifier="rs-new")
    await fresh.subscribe("rs/#")
    got = await next_message(fresh)
    assert (got.topic.value, got.payload, got.retain) == ("rs/kept", b"retained", True)


@pytest.mark.parametrize("server_kind", ["jetlake"], indirect=True)
async def test_unacked_delivery_is_resent_with_dup_on_reconnect(
    mqtt_server: MQTTServer, mqtt_client: Connect, open_raw: OpenRaw
) -> None:
    """MQTT 3.1.1 §4.4: resent at once on reconnect (the reference waits for ack_wait)."""
    first = await open_raw(mqtt_server)
    first.send(mqtt.Connect("redo", False, 0))
    assert isinstance(await first.packet(), mqtt.ConnAck)
    first.send(mqtt.Subscribe(1, ((b"redo/x", 1),)))
    assert await first.packet() == mqtt.SubAck(1, (1,))
    pub = await mqtt_client(identifier="redo-pub")
    await pub.publish("redo/x", b"important", qos=1)
    msg = await first.packet()
    assert isinstance(msg, mqtt.Publish) and not msg.dup
    first.close()  # gone without acknowledging it
    assert await first.closed()
    again = await open_raw(mqtt_server)
    again.send(mqtt.Connect("redo", False, 0))
    assert await again.packet() == mqtt.ConnAck(True, 0)
    resent = await again.packet()
    assert isinstance(resent, mqtt.Publish)
    assert (resent.payload, resent.qos, resent.dup) == (b"important", 1, True)
    assert resent.packet_id == msg.packet_id  # [MQTT-4.3.2]: the same packet identifier
    again.send(mqtt.PubAck(resent.packet_id))
    again.send(mqtt.Disconnect())
    assert await again.closed()


async def test_qos2_message_held_until_pubrel_survives_kill(
    start_mqtt: StartMQTT, open_raw: OpenRaw, connect: NatsConnect
) -> None:
    """Between PUBREC and PUBREL the message is the server's: a kill -9 must not lose it."""
    server = start_mqtt()
    raw = await open_raw(server)
    raw.send(mqtt.Connect("q2", False, 0))
    assert await raw.packet() == mqtt.ConnAck(False, 0)
    raw.send(mqtt.Publish(b"q2/x", b"exactly once", 2, packet_id=5))
    assert await raw.packet() == mqtt.PubRec(5)
    server.process.kill()
    server.process.start()
    server.mqtt_port = mqtt_port(server.process)
    nc = await connect(server.process)
    nsub = await nc.subscribe("q2.x")
    await sync(nc)
    back = await open_raw(server)
    back.send(mqtt.Connect("q2", False, 0))
    assert await back.packet() == mqtt.ConnAck(True, 0)
    back.send(mqtt.PubRel(5))
    assert await back.packet() == mqtt.PubComp(5)
    msg = await nsub.next_msg(timeout=5)
    assert (msg.data, msg.headers) == (b"exactly once", {"Nmqtt-Pub": "2"})


@pytest.mark.parametrize("server_kind", ["jetlake"], indirect=True)
async def test_pubrel_owed_is_sent_again_after_kill(
    start_mqtt: StartMQTT, open_raw: OpenRaw, mqtt_client: Connect
) -> None:
    """QoS 2 out: after PUBREC the server owes a PUBREL; a restart must not forget it."""
    server = start_mqtt()
    raw = await open_raw(server)
    raw.send(mqtt.Connect("q2out", False, 0))
    assert isinstance(await raw.packet(), mqtt.ConnAck)
    raw.send(mqtt.Subscribe(1, ((b"q2out/x", 2),)))
    assert await raw.packet() == mqtt.SubAck(1, (2,))
    pub = await mqtt_client(server, identifier="q2out-pub")
    await pub.publish("q2out/x", b"two", qos=2)
    msg = await raw.packet()
    assert isinstance(msg, mqtt.Publish) and msg.qos == 2
    raw.send(mqtt.PubRec(msg.packet_id))
    assert await raw.packet() == mqtt.PubRel(msg.packet_id)  # sent once it is recorded
    await pub.__aexit__(None, None, None)
    server.process.kill()
    server.process.start()
    server.mqtt_port = mqtt_port(server.process)
    back = await open_raw(server)
    back.send(mqtt.Connect("q2out", False, 0))
    assert await back.packet() == mqtt.ConnAck(True, 0)
    assert await back.packet() == mqtt.PubRel(msg.packet_id)
    back.send(mqtt.PubComp(msg.packet_id))


async def test_unacked_delivery_is_resent_with_dup_after_ack_wait(
    start_mqtt: StartMQTT, open_raw: OpenRaw, mqtt_client: Connect
) -> None:
    server = start_mqtt('ack_wait: "1s"')
    raw = await open_raw(server)
    raw.send(mqtt.Connect("aw", True, 0))
    assert isinstance(await raw.packet(), mqtt.ConnAck)
    raw.send(mqtt.Subscribe(1, ((b"aw/x", 1),)))
    assert await raw.packet() == mqtt.SubAck(1, (1,))
    pub = await mqtt_client(server, identifier="aw-pub")
    await pub.publish("aw/x", b"late", qos=1)
    first = await raw.packet()
    assert isinstance(first, mqtt.Publish) and not first.dup
    again = await raw.packet()  # no PUBACK: resent once ack_wait passes
    assert isinstance(again, mqtt.Publish)
    assert (again.payload, again.dup, again.packet_id) == (b"late", True, first.packet_id)
    raw.send(mqtt.PubAck(again.packet_id))


async def test_a_subscription_past_the_streams_consumer_limit_is_refused_alone(
    start_mqtt: StartMQTT, open_raw: OpenRaw, mqtt_client: Connect
) -> None:
    """Each QoS 1 subscription is a consumer of the messages stream: past the server's
    `default_max_consumers` the SUBACK refuses that filter (0x80), as on the reference,
    and the connection and its other subscriptions go on (QoS 0 needs no consumer)."""
    server = start_mqtt("", "jetstream { limits { default_max_consumers: 2 } }")
    raw = await open_raw(server)
    raw.send(mqtt.Connect("many", False, 0))
    assert isinstance(await raw.packet(), mqtt.ConnAck)
    raw.send(mqtt.Subscribe(1, ((b"lim/1", 1), (b"lim/2", 1), (b"lim/3", 1), (b"lim/0", 0))))
    assert await raw.packet() == mqtt.SubAck(1, (1, 1, mqtt.SUBACK_FAILURE, 0))
    pub = await mqtt_client(server=server, identifier="lim-pub")
    await pub.publish("lim/2", b"kept", qos=1)
    msg = await raw.packet()
    assert isinstance(msg, mqtt.Publish)
    assert (msg.topic, msg.payload, msg.qos) == (b"lim/2", b"kept", 1)


async def test_subscriptions_past_the_sessions_ack_budget_are_refused(
    start_mqtt: StartMQTT, open_raw: OpenRaw
) -> None:
    """A session's QoS 1 consumers may hold no more unacknowledged messages together than
    there are packet identifiers (65,535): at `max_ack_pending` 30,000 a third is
    refused (0x80), as on the reference, and unsubscribing one frees its share."""
    server = start_mqtt("max_ack_pending: 30000")
    raw = await open_raw(server)
    raw.send(mqtt.Connect("budget", True, 0))
    assert isinstance(await raw.packet(), mqtt.ConnAck)
    raw.send(mqtt.Subscribe(1, ((b"bud/1", 1), (b"bud/2", 1), (b"bud/3", 1), (b"bud/0", 0))))
    assert await raw.packet() == mqtt.SubAck(1, (1, 1, mqtt.SUBACK_FAILURE, 0))
    raw.send(mqtt.Unsubscribe(2, (b"bud/1",)))
    assert await raw.packet() == mqtt.UnsubAck(2)
    raw.send(mqtt.Subscribe(3, ((b"bud/3", 1),)))
    assert await raw.packet() == mqtt.SubAck(3, (1,))
