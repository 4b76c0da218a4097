"""MQTT ↔ MQTT and MQTT ↔ NATS traffic with aiomqtt and nats-py, reference and jetlake alike."""

from __future__ import annotations

import pytest

from tests.conftest import Connect as NatsConnect
from tests.mqtt.conftest import Connect, MQTTServer, StartMQTT, messages_until, next_message
from tests.support.clients import sync


async def test_qos0_mqtt_to_mqtt_and_nats(
    mqtt_server: MQTTServer, mqtt_client: Connect, connect: NatsConnect
) -> None:
    """An MQTT publish reaches MQTT subscribers and NATS subscribers on the mapped subject."""
    sub = await mqtt_client(identifier="sub")
    await sub.subscribe("dev/+/temp")
    nc = await connect(mqtt_server.process)
    nsub = await nc.subscribe("dev.*.temp")
    await sync(nc)
    pub = await mqtt_client(identifier="pub")
    await pub.publish("dev/a/temp", b"21.5")
    msg = await next_message(sub)
    assert (msg.topic.value, msg.payload, msg.qos, msg.retain) == ("dev/a/temp", b"21.5", 0, False)
    nmsg = await nsub.next_msg(timeout=5)
    assert (nmsg.subject, nmsg.data) == ("dev.a.temp", b"21.5")
    assert nmsg.headers == {"Nmqtt-Pub": "0"}


@pytest.mark.parametrize(
    ("subject", "topic"),
    [
        ("a.b", "a/b"),
        ("a//b.c", "a.b/c"),
        ("/.a", "/a"),
        ("a./", "a/"),
        ("a./.b", "a//b"),
    ],
)
async def test_nats_publish_reaches_mqtt_with_the_mapped_topic(
    mqtt_server: MQTTServer, mqtt_client: Connect, connect: NatsConnect, subject: str, topic: str
) -> None:
    sub = await mqtt_client(identifier="map-sub")
    await sub.subscribe("#", qos=1)
    nc = await connect(mqtt_server.process)
    await nc.publish(subject, b"x")
    await nc.publish("map-end", b"")
    got = await messages_until(sub, "map-end")
    assert [(m.topic.value, m.qos) for m in got] == [(topic, 0)]  # NATS publishes: QoS 0


async def test_wildcards_levels_and_reserved_topics(
    mqtt_server: MQTTServer, mqtt_client: Connect, connect: NatsConnect
) -> None:
    """`a/#` matches `a` itself; leading wildcards skip `$` topics; `$SYS/#` does not."""
    sub = await mqtt_client(identifier="sub")
    for f in ("a/#", "#", "+/x", "$SYS/#"):
        await sub.subscribe(f)
    nc = await connect(mqtt_server.process)
    for subject in ("a", "a.b.c", "$SYS.x", "q.x", "end"):
        await nc.publish(subject, subject.encode())
    got = sorted(m.topic.value for m in await messages_until(sub, "end"))
    # a: a/# and #; a/b/c: a/# and #; $SYS/x: only $SYS/#; q/x: # and +/x
    assert got == sorted(["a", "a", "a/b/c", "a/b/c", "$SYS/x", "q/x", "q/x"])


@pytest.mark.parametrize(("pub_qos", "sub_qos"), [(1, 1), (1, 2), (2, 2), (2, 1), (1, 0), (2, 0)])
async def test_qos_delivered_is_the_minimum(
    mqtt_client: Connect, pub_qos: int, sub_qos: int
) -> None:
    sub = await mqtt_client(identifier="sub")
    await sub.subscribe("q/t", qos=sub_qos)
    pub = await mqtt_client(identifier="pub")
    for i in range(3):
        await pub.publish("q/t", b"%d" % i, qos=pub_qos)
    got = [await next_message(sub) for _ in range(3)]
    assert [m.payload for m in got] == [b"0", b"1", b"2"]
    assert {m.qos for m in got} == {min(pub_qos, sub_qos)}


async def test_qos1_publish_is_stored_for_a_qos1_subscriber_only_once(
    mqtt_client: Connect,
) -> None:
    """A QoS 1 subscriber gets each QoS 1 message once (from its consumer, not also live)."""
    sub = await mqtt_client(identifier="sub")
    await sub.subscribe("once/#", qos=1)
    pub = await mqtt_client(identifier="pub")
    await pub.publish("once/a", b"1", qos=1)
    await pub.publish("once/end", b"", qos=1)  # behind once/a in the stream; a live copy
    # of once/a would come before both, routed at publish time
    got = await messages_until(sub, "once/end")
    assert [(m.topic.value, m.payload) for m in got] == [("once/a", b"1")]


async def test_retained_messages(mqtt_client: Connect) -> None:
    """One per topic, RETAIN set for new subscribers at min QoS, empty payload deletes."""
    pub = await mqtt_client(identifier="pub")
    await pub.publish("r/a", b"old", qos=1, retain=True)
    await pub.publish("r/a", b"new", qos=1, retain=True)
    await pub.publish("r/b", b"b", qos=0, retain=True)
    await pub.publish("r/c", b"c", qos=1, retain=True)
    await pub.publish("r/c", b"", qos=1, retain=True)
    sub = await mqtt_client(identifier="sub")
    await sub.subscribe("r/#", qos=1)
    got = sorted(
        [(m.topic.value, m.payload, m.qos, m.retain) for m in (await next_message(sub),)]
        + [(m.topic.value, m.payload, m.qos, m.retain) for m in (await next_message(sub),)]
    )
    assert got == [("r/a", b"new", 1, True), ("r/b", b"b", 0, True)]
    await pub.publish("r/a", b"live", qos=1, retain=True)
    await pub.publish("r/end", b"", qos=1)  # through the consumer too, so after r/a
    live = await messages_until(sub, "r/end")
    assert [(m.payload, m.retain) for m in live] == [(b"live", False)]


async def test_nats_subscriber_sees_qos1_and_2_headers(
    mqtt_server: MQTTServer, mqtt_client: Connect, connect: NatsConnect
) -> None:
    nc = await connect(mqtt_server.process)
    nsub = await nc.subscribe("h.>")
    await sync(nc)
    pub = await mqtt_client(identifier="pub")
    await pub.publish("h/1", b"one", qos=1)
    await pub.publish("h/2", b"two", qos=2)
    first, second = await nsub.next_msg(timeout=5), await nsub.next_msg(timeout=5)
    assert (first.subject, first.data, first.headers) == ("h.1", b"one", {"Nmqtt-Pub": "1"})
    assert (second.subject, second.data, second.headers) == ("h.2", b"two", {"Nmqtt-Pub": "2"})


async def test_mqtt_publishes_land_in_a_stream_on_the_mapped_subjects(
    start_mqtt: StartMQTT, mqtt_client: Connect, connect: NatsConnect
) -> None:
    """How MQTT data reaches segments and the lake: an ordinary stream captures it."""
    server = start_mqtt()
    js = (await connect(server.process)).jetstream()
    await js.add_stream(name="SENSORS", subjects=["fleet.>"])
    pub = await mqtt_client(server, identifier="fleet-pub")
    await pub.publish("fleet/truck.7/temp", b"21.5", qos=0)
    await pub.publish("fleet/truck.7/temp", b"22.0", qos=1)  # its PUBACK: both were routed
    first = await js.get_msg("SENSORS", 1)
    last = await js.get_last_msg("SENSORS", "fleet.truck//7.temp")
    assert (first.data, first.headers) == (b"21.5", {"Nmqtt-Pub": "0"})
    assert (last.seq, last.data, last.headers) == (2, b"22.0", {"Nmqtt-Pub": "1"})


async def test_leading_wildcards_never_deliver_dollar_topics(
    mqtt_server: MQTTServer, mqtt_client: Connect, connect: NatsConnect
) -> None:
    """[MQTT-4.7.2-1] on every path: retained on subscribe, QoS 0/1/2, NATS publishes.

    One subscriber per filter, so each stream of deliveries has one order: what its
    consumer or the router would send of `$dollar/…` comes before the marker."""
    pub = await mqtt_client(identifier="dollar-pub")
    await pub.publish("$dollar/r", b"retained", qos=1, retain=True)
    filters = {"#": 1, "+/+": 2, "+/#": 0, "+/x": 1, "$dollar/+": 2}
    subs = {}
    for topic_filter, qos in filters.items():
        subs[topic_filter] = await mqtt_client(identifier=f"dollar-{qos}-{len(subs)}")
        await subs[topic_filter].subscribe(topic_filter, qos=qos)
    for qos in (0, 1, 2):
        await pub.publish("$dollar/x", b"%d" % qos, qos=qos)
    nc = await connect(mqtt_server.process)
    await nc.publish("$dollar.n", b"nats")
    await nc.flush()
    await pub.publish("dollar/x", b"end", qos=1)  # every filter but `$dollar/+` matches it
    await pub.publish("$dollar/r", b"", qos=1, retain=True)
    leaked = []
    for topic_filter in ("#", "+/+", "+/#", "+/x"):
        while (msg := await next_message(subs[topic_filter])).topic.value != "dollar/x":
            if msg.topic.value.startswith("$"):
                leaked.append((topic_filter, msg.topic.value, msg.payload, msg.retain))
    # The reference (v2.15) sends retained `$` messages to leading wildcards; jetlake does not.
    retained_leak = [(f, "$dollar/r", b"retained", True) for f in ("#", "+/+", "+/#")]
    assert leaked == (retained_leak if mqtt_server.kind == "nats-server" else [])
    control = [await next_message(subs["$dollar/+"]) for _ in range(5)]
    assert sorted((m.topic.value, m.payload) for m in control) == [
        ("$dollar/n", b"nats"),
        ("$dollar/r", b"retained"),
        ("$dollar/x", b"0"),
        ("$dollar/x", b"1"),
        ("$dollar/x", b"2"),
    ]
