"""MQTT on a three-server JetStream cluster when the server a device's session was on,
also leading `$MQTT_msgs`, is killed with -9 during QoS 1 and QoS 2 traffic: nothing
acknowledged to a publisher is lost.

One cluster a kind is shared by the module: the fixture sets the scene on server A and
kills it; each test then reconnects its clients to the survivors. What MQTT 3.1.1
promises: a message whose PUBACK (QoS 1) or PUBCOMP (QoS 2) reached its publisher
reaches a persistent subscriber at least once (QoS 1) or exactly once (QoS 2) — both
servers keep this; a QoS 2 message whose PUBREC came back before the kill is released on
another server by the PUBREL the publisher sends again there, once however often it is
sent; retained messages read the same through every surviving server. The reference, at
times, loses the released message and misses a retained one on a survivor (see the
tests); jetlake keeps both. jetlake runs by default, the reference under `soak` (its
elections take 4-9 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import aiomqtt
import nats
import pytest

from ingest.parser import mqtt
from tests.conftest import KIND_IDS
from tests.jscluster.support import eventually, leader_of, start_js_cluster, stop
from tests.mqtt.conftest import CLUSTER_DEADLINE as DEADLINE
from tests.mqtt.conftest import MQTTServer, RawMQTT, connected, on
from tests.support.servers import ServerProcess, enabled_kinds

CONFIG = "mqtt { port: -1, stream_replicas: 3 }\n"
OFFLINE = 10  # messages of each QoS published while the device is away
HELD_PID = 7  # the QoS 2 exchange left between PUBREC and PUBREL at the kill
RETAINED = {"fault/state/1": (b"one", 1), "fault/state/2": (b"two, again", 2)}


@dataclass
class Crash:
    kind: str
    survivors: list[MQTTServer]
    acked: dict[bytes, int]  # payload -> QoS: PUBACK or PUBCOMP reached the publisher
    sent: dict[bytes, int]  # everything the publisher sent, acknowledged or not


async def raw_session(server: MQTTServer, client_id: str) -> tuple[RawMQTT, mqtt.ConnAck]:
    """A raw client with a persistent session, for exchanges a library completes itself."""
    deadline = time.monotonic() + DEADLINE
    while True:
        raw = await RawMQTT.open(server)
        raw.send(mqtt.Connect(client_id, False, 0))
        with contextlib.suppress(TimeoutError, ConnectionError):
            ack = await raw.packet()
            if isinstance(ack, mqtt.ConnAck) and ack.code == mqtt.ACCEPTED:
                return raw, ack
        raw.close()
        assert time.monotonic() < deadline, f"{client_id} not accepted on {server.kind}"
        await asyncio.sleep(0.2)


async def collect(client: aiomqtt.Client, until: set[str]) -> list[aiomqtt.Message]:
    """Messages received up to the markers (payload `end`) on every topic of `until`."""
    got: list[aiomqtt.Message] = []
    waiting = set(until)
    async with asyncio.timeout(DEADLINE):
        async for msg in client.messages:
            if msg.payload == b"end":
                waiting.discard(msg.topic.value)
                if not waiting:
                    return got
            else:
                got.append(msg)
    raise AssertionError("the message stream ended")


async def subscribed(server: MQTTServer, topic_filter: str, qos: int) -> aiomqtt.Client:
    """A clean client subscribed at `qos`, tried again while the server refuses the
    subscription (the reference does while its consumer cannot be made in time)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        client = await connected(server, f"reader-{server.mqtt_port}")
        granted = await client.subscribe(topic_filter, qos=qos, timeout=DEADLINE)
        if granted[0] == qos:
            return client
        await client.__aexit__(None, None, None)
        assert time.monotonic() < deadline, f"{topic_filter} refused by {server.kind}"


async def publish_ends(server: MQTTServer, *topics: str) -> None:
    """Markers sent after everything else: a duplicate would come before them."""
    sender = await connected(server, "ender")
    for topic in topics:
        await sender.publish(topic, b"end", qos=2)
    await sender.__aexit__(None, None, None)


async def _place_leaders(servers: list[ServerProcess]) -> ServerProcess:
    """The server to kill: the leader of `$MQTT_msgs`, with the leaders of `$MQTT_sess` and
    `$MQTT_qos2in` moved off it, so that right after the kill a client is accepted on a
    survivor and its PUBREL finds the held message while `$MQTT_msgs` has no leader yet."""
    nc = await nats.connect([s.url for s in servers])
    try:
        js = nc.jetstream()
        victim = leader_of(await js.stream_info("$MQTT_msgs"), servers)
        for stream in ("$MQTT_sess", "$MQTT_qos2in"):

            async def moved(stream: str = stream) -> bool:
                if leader_of(await js.stream_info(stream), servers) is not victim:
                    return True
                await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
                return False

            await eventually(moved, f"{stream} led off the victim")
        return victim
    finally:
        await nc.close()


async def _traffic(publisher: aiomqtt.Client, sent: dict[bytes, int], acked: dict[bytes, int]):
    """QoS 1 and 2 publishes, one after another, until cancelled by the kill."""
    for i in range(1_000_000):
        qos = 1 + i % 2
        payload = b"live-q%d-%d" % (qos, i)
        sent[payload] = qos
        await publisher.publish(f"fault/q{qos}", payload, qos=qos)
        acked[payload] = qos


async def _crash(servers: list[ServerProcess]) -> Crash:
    first = await connected(on(servers[0]), "probe")  # waits for MQTT's streams
    await first.__aexit__(None, None, None)
    victim = await _place_leaders(servers)
    a = on(victim)
    device = await connected(a, "device", clean_session=False)
    await device.subscribe("fault/q1", qos=1)
    await device.subscribe("fault/q2", qos=2)
    await device.__aexit__(None, None, None)
    receiver = await connected(a, "receiver", clean_session=False)
    await receiver.subscribe("fault/held", qos=2)
    await receiver.__aexit__(None, None, None)

    publisher = await connected(a, "publisher")
    await publisher.publish("fault/state/2", b"two", qos=1, retain=True)
    await publisher.publish("fault/state/3", b"three", qos=1, retain=True)
    for topic, (payload, qos) in RETAINED.items():
        await publisher.publish(topic, payload, qos=qos, retain=True)
    await publisher.publish("fault/state/3", b"", qos=1, retain=True)  # cleared

    sender, _ = await raw_session(a, "sender")
    sender.send(mqtt.Publish(b"fault/held", b"held", 2, False, False, HELD_PID))
    assert await sender.packet() == mqtt.PubRec(HELD_PID)

    sent: dict[bytes, int] = {}
    acked: dict[bytes, int] = {}
    for i in range(OFFLINE):
        for qos in (1, 2):
            payload = b"q%d-%d" % (qos, i)
            sent[payload] = qos
            await publisher.publish(f"fault/q{qos}", payload, qos=qos)
            acked[payload] = qos
    traffic = asyncio.create_task(_traffic(publisher, sent, acked))
    deadline = time.monotonic() + DEADLINE
    while len(acked) < 2 * OFFLINE + 6:  # a few live ones acknowledged, then the kill
        assert time.monotonic() < deadline and not traffic.done(), "live traffic stalled"
        await asyncio.sleep(0.01)
    victim.kill()
    traffic.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
        await traffic
    sender.close()
    with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
        await publisher.__aexit__(None, None, None)
    survivors = [on(s) for s in servers if s is not victim]
    await release(survivors[0])  # at once, as a device would, while leaders may be moving
    return Crash(victim.kind, survivors, acked, sent)


async def release(server: MQTTServer) -> None:
    """The sender's PUBREL, sent again on `server` until its PUBCOMP comes (a server that
    cannot complete the release closes the connection instead)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        sender, connack = await raw_session(server, "sender")
        assert connack.session_present
        sender.send(mqtt.PubRel(HELD_PID))
        with contextlib.suppress(TimeoutError, ConnectionError):
            comp = await sender.packet()
            if comp is not None:
                sender.close()
                assert comp == mqtt.PubComp(HELD_PID)
                return
        sender.close()
        assert time.monotonic() < deadline, f"no PUBCOMP from {server.kind}"


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(kind, id=KIND_IDS[kind], marks=[pytest.mark.soak] * (kind == "nats-server"))
        for kind in enabled_kinds()
    ],
)
def crash(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Crash]:
    servers = start_js_cluster(request.param, tmp_path_factory.mktemp("mqtt-faults"), config=CONFIG)
    try:
        yield asyncio.run(_crash(servers))
    finally:
        stop(servers)


def reference_may_fail(crash: Crash, request: pytest.FixtureRequest, reason: str) -> None:
    """Where the reference loses what jetlake keeps, and not on every run (it depends on
    when its leaders move): expected to fail there, not required to."""
    if crash.kind == "nats-server":
        request.applymarker(pytest.mark.xfail(reason=reason, strict=False))


async def test_acknowledged_messages_reach_the_session_on_another_server(crash: Crash) -> None:
    """QoS 1 at least once, QoS 2 exactly once, for every message acknowledged before the
    kill; a QoS 2 message sent but not acknowledged arrives at most once."""
    b, c = crash.survivors
    device = await connected(b, "device", clean_session=False)
    await publish_ends(c, "fault/q1", "fault/q2")
    got = await collect(device, {"fault/q1", "fault/q2"})
    await device.__aexit__(None, None, None)

    counts = Counter(msg.payload for msg in got)
    assert set(counts) <= set(crash.sent), "a message nobody sent"
    for msg in got:  # each at its subscription's QoS, on its topic
        assert (msg.topic.value, msg.qos) == (f"fault/q{msg.qos}", crash.sent[msg.payload])
    assert {p for p, q in crash.acked.items() if q == 1} <= set(counts), "QoS 1 lost"
    assert {p: counts[p] for p, q in crash.acked.items() if q == 2} == {
        p: 1 for p, q in crash.acked.items() if q == 2
    }, "QoS 2 not exactly once"
    assert all(counts[p] <= 1 for p, q in crash.sent.items() if q == 2), "QoS 2 twice"


async def test_a_qos2_message_released_on_another_server_is_delivered_once(
    crash: Crash, request: pytest.FixtureRequest
) -> None:
    """PUBREC came from the killed server; the PUBREL sent again on a survivor right after
    the kill released the message, and one more, on the other survivor, only completes
    it again.

    The first PUBREL comes while `$MQTT_msgs` has no leader. The reference deletes the
    held message before storing it for subscribers; the store times out, the PUBREL sent
    again finds nothing and is completed: a message its publisher may no longer resend
    (PUBREC came) is lost. jetlake stores first and forgets after, so the PUBREL sent
    again does the release again, and the stored copy's Nats-Msg-Id keeps it one."""
    reference_may_fail(crash, request, "the reference loses the held message")
    b, c = crash.survivors
    receiver = await connected(c, "receiver", clean_session=False)
    await release(c)
    await publish_ends(b, "fault/held")
    got = await collect(receiver, {"fault/held"})
    await receiver.__aexit__(None, None, None)
    assert [(m.payload, m.qos) for m in got] == [(b"held", 2)]


async def test_retained_messages_read_the_same_through_every_survivor(
    crash: Crash, request: pytest.FixtureRequest
) -> None:
    """Retained through the killed server before the kill, one replaced and one cleared.

    On the reference one survivor at times lacks a retained message that `$MQTT_rmsgs`
    holds (its copy of the retained messages missed the replacement), so a subscriber
    there does not get it; jetlake reads the same through every server."""
    reference_may_fail(crash, request, "the reference may miss a retained message")
    for server in crash.survivors:
        reader = await subscribed(server, "fault/state/#", 2)
        await reader.publish("fault/state/end", b"end", qos=1)
        got = await collect(reader, {"fault/state/end"})
        await reader.__aexit__(None, None, None)
        seen = {m.topic.value: (m.payload, m.qos) for m in got if m.retain}
        assert (seen, len(got)) == (RETAINED, len(RETAINED)), f"through {server.kind}"
