"""Protocol-level behaviour over raw sockets: CONNACK codes, closes, keepalive, Will, takeover."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import aiomqtt
import pytest

from ingest.parser import mqtt
from tests.mqtt.conftest import Connect, MQTTServer, RawMQTT, StartMQTT, next_message

OpenRaw = Callable[[MQTTServer], Awaitable[RawMQTT]]


def connect_bytes(
    level: int = 4, flags: int = 2, client_id: bytes = b"c", tail: bytes = b""
) -> bytes:
    body = b"\x00\x04MQTT" + bytes((level, flags)) + b"\x00\x00"
    body += len(client_id).to_bytes(2, "big") + client_id + tail
    return b"\x10" + mqtt.encode_varint(len(body)) + body


async def connected(open_raw: OpenRaw, server: MQTTServer, packet: mqtt.Connect) -> RawMQTT:
    raw = await open_raw(server)
    raw.send(packet)
    assert await raw.packet() == mqtt.ConnAck(False, 0)
    return raw


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (connect_bytes(level=3), 1),
        (connect_bytes(level=5), 1),
        (connect_bytes(flags=0, client_id=b""), 2),
    ],
)
async def test_connack_refusals(
    mqtt_server: MQTTServer, open_raw: OpenRaw, wire: bytes, code: int
) -> None:
    raw = await open_raw(mqtt_server)
    raw.send(wire)
    assert await raw.packet() == mqtt.ConnAck(False, code)
    assert await raw.closed()


async def test_bad_credentials_get_code_5(start_mqtt: StartMQTT, open_raw: OpenRaw) -> None:
    server = start_mqtt("", "authorization { user: alice, password: s3cret }")
    raw = await open_raw(server)
    raw.send(mqtt.Connect("c", True, 0, None, "alice", b"wrong"))
    assert await raw.packet() == mqtt.ConnAck(False, 5)
    assert await raw.closed()
    good = await open_raw(server)
    good.send(mqtt.Connect("c", True, 0, None, "alice", b"s3cret"))
    assert await good.packet() == mqtt.ConnAck(False, 0)


async def test_empty_client_id_with_clean_session_is_accepted(
    mqtt_server: MQTTServer, open_raw: OpenRaw
) -> None:
    raw = await open_raw(mqtt_server)
    raw.send(connect_bytes(flags=2, client_id=b""))
    assert await raw.packet() == mqtt.ConnAck(False, 0)


CONNECT = mqtt.Connect("c", True, 0)


@pytest.mark.parametrize(
    "after_connect",
    [
        mqtt.encode(CONNECT),  # a second CONNECT
        b"\x30\x05\x00\x03a/#",  # PUBLISH with a wildcard
        b"\x30\x05\x00\x03a/+",
        b"\x36\x04\x00\x01ax",  # QoS 3
        b"\x62\x01\x00",  # malformed PUBREL
        b"\xf0\x00",  # reserved packet type
    ],
)
async def test_protocol_violations_close(
    mqtt_server: MQTTServer, open_raw: OpenRaw, after_connect: bytes
) -> None:
    raw = await connected(open_raw, mqtt_server, CONNECT)
    raw.send(after_connect)
    assert await raw.closed()


async def test_first_packet_must_be_connect(mqtt_server: MQTTServer, open_raw: OpenRaw) -> None:
    raw = await open_raw(mqtt_server)
    raw.send(mqtt.PingReq())
    assert await raw.closed()


async def test_publish_over_max_payload_closes(mqtt_server: MQTTServer, open_raw: OpenRaw) -> None:
    """The shared server has max_payload 1000; the NATS size counts the `Nmqtt-Pub` header."""
    raw = await connected(open_raw, mqtt_server, CONNECT)
    raw.send(mqtt.Publish(b"t", b"x" * 900))
    raw.send(mqtt.PingReq())
    assert await raw.packet() == mqtt.PingResp()
    raw.send(mqtt.Publish(b"t", b"x" * 1000))
    assert await raw.closed()


async def test_keepalive_closes_a_silent_client_after_one_and_a_half_intervals(
    mqtt_server: MQTTServer, open_raw: OpenRaw
) -> None:
    """1.5 x keepalive in whole seconds, as the reference computes it: 1 s for keepalive 1."""
    raw = await connected(open_raw, mqtt_server, mqtt.Connect("ka", True, 1))
    started = time.monotonic()
    assert await raw.closed()
    assert 0.9 <= time.monotonic() - started < 1.4


async def test_suback_refuses_invalid_and_reserved_filters(
    mqtt_server: MQTTServer, open_raw: OpenRaw
) -> None:
    raw = await connected(open_raw, mqtt_server, CONNECT)
    raw.send(mqtt.Subscribe(7, ((b"ok/+", 1), (b"$MQTT/sess/x", 0), (b"a/#/b", 0), (b"x", 2))))
    assert await raw.packet() == mqtt.SubAck(7, (1, 0x80, 0x80, 2))


async def test_will_on_abnormal_close_only(
    mqtt_server: MQTTServer, open_raw: OpenRaw, mqtt_client: Connect
) -> None:
    watcher = await mqtt_client(identifier="watcher")
    await watcher.subscribe("will/#")
    gone = await connected(
        open_raw, mqtt_server, mqtt.Connect("w1", True, 0, mqtt.Will(b"will/w1", b"lost", 0, False))
    )
    gone.close()  # no DISCONNECT: the Will goes out
    msg = await next_message(watcher)
    assert (msg.topic.value, msg.payload) == ("will/w1", b"lost")
    polite = await connected(
        open_raw, mqtt_server, mqtt.Connect("w2", True, 0, mqtt.Will(b"will/w2", b"no", 0, False))
    )
    polite.send(mqtt.Disconnect())
    assert await polite.closed()
    await (await mqtt_client(identifier="p")).publish("will/end", b"")
    assert (await next_message(watcher)).topic.value == "will/end"  # no Will from w2


async def test_takeover_closes_the_first_connection_without_will(
    mqtt_server: MQTTServer, open_raw: OpenRaw, mqtt_client: Connect
) -> None:
    watcher = await mqtt_client(identifier="watcher")
    await watcher.subscribe("tw/#")
    first = await connected(
        open_raw, mqtt_server, mqtt.Connect("dup", True, 0, mqtt.Will(b"tw/dup", b"x", 0, False))
    )
    second = await connected(open_raw, mqtt_server, mqtt.Connect("dup", True, 0))
    assert await first.closed()
    second.send(mqtt.PingReq())
    assert await second.packet() == mqtt.PingResp()
    await (await mqtt_client(identifier="p")).publish("tw/end", b"")
    assert (await next_message(watcher)).topic.value == "tw/end"


async def test_qos2_inbound_is_deduplicated_until_pubrel(
    mqtt_server: MQTTServer, open_raw: OpenRaw, mqtt_client: Connect
) -> None:
    sub = await mqtt_client(identifier="sub")
    await sub.subscribe("d/#", qos=2)
    raw = await connected(open_raw, mqtt_server, CONNECT)
    raw.send(mqtt.Publish(b"d/x", b"once", 2, packet_id=9))
    assert await raw.packet() == mqtt.PubRec(9)
    raw.send(mqtt.Publish(b"d/x", b"once", 2, dup=True, packet_id=9))
    assert await raw.packet() == mqtt.PubRec(9)
    raw.send(mqtt.PubRel(9))
    assert await raw.packet() == mqtt.PubComp(9)
    raw.send(mqtt.Publish(b"d/end", b"", 2, packet_id=10))
    assert await raw.packet() == mqtt.PubRec(10)
    raw.send(mqtt.PubRel(10))
    got = [await next_message(sub), await next_message(sub)]
    assert [(m.topic.value, m.payload) for m in got] == [("d/x", b"once"), ("d/end", b"")]


async def test_aiomqtt_refused_with_bad_protocol_level_message(
    mqtt_server: MQTTServer,
) -> None:
    """MQTT 5 clients are refused (the server speaks 3.1.1 only)."""
    client = aiomqtt.Client(
        "127.0.0.1", mqtt_server.mqtt_port, protocol=aiomqtt.ProtocolVersion.V5, timeout=5
    )
    with pytest.raises(aiomqtt.MqttError):
        async with client:
            pass


USERS = """
authorization {
  users: [
    {user: dev, password: pw, permissions: {publish: "dev.>", subscribe: "dev.>"}}
    {user: ops, password: pw}
  ]
}
"""


async def test_mqtt_users_share_nats_permissions(start_mqtt: StartMQTT, open_raw: OpenRaw) -> None:
    """A refused filter gets 0x80; a refused publish is dropped (QoS 1 still acknowledged)."""
    server = start_mqtt("", USERS)
    ops = await connected(open_raw, server, mqtt.Connect("ops", True, 0, None, "ops", b"pw"))
    ops.send(mqtt.Subscribe(1, ((b"#", 0),)))
    assert await ops.packet() == mqtt.SubAck(1, (0,))
    dev = await connected(open_raw, server, mqtt.Connect("dev", True, 0, None, "dev", b"pw"))
    # `dev/#` needs `dev` too, which `dev.>` does not allow: refused, as by the reference.
    dev.send(mqtt.Subscribe(2, ((b"dev/+", 1), (b"other/#", 1), (b"dev/#", 1))))
    assert await dev.packet() == mqtt.SubAck(2, (1, 0x80, 0x80))
    dev.send(mqtt.Publish(b"other/x", b"no", 1, packet_id=3))
    assert await dev.packet() == mqtt.PubAck(3)
    dev.send(mqtt.Publish(b"dev/x", b"yes", 0))
    got = await ops.packet()
    assert isinstance(got, mqtt.Publish)
    assert (got.topic, got.payload) == (b"dev/x", b"yes")


async def test_mqtt_authorization_block_overrides(start_mqtt: StartMQTT, open_raw: OpenRaw) -> None:
    server = start_mqtt("authorization { token: t0k }", "authorization { user: u, password: p }")
    raw = await open_raw(server)
    raw.send(mqtt.Connect("c", True, 0, None, "u", b"p"))  # the NATS user is not MQTT's
    assert await raw.packet() == mqtt.ConnAck(False, 5)
    await connected(open_raw, server, mqtt.Connect("c2", True, 0, None, "any", b"t0k"))
