"""[MQTT-4.7.2-1] on each delivery path, without a server: a filter starting with a
wildcard (`#`, `+`, `+/…`) does not match a `$` topic; a filter naming `$x` does."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ingest.parser import mqtt
from ingest.parser.mqtt_topics import filter_subjects
from ingest.parser.subjects import subject_matches
from ingest.server.mqtt.retained import RetainedMsg, RetainedStore
from ingest.server.mqtt.session import MSGS_PREFIX, Session
from ingest.server.mqtt.subscriptions import MQTTSubscription

# (filter, topic, delivered)
CASES = [
    (b"#", b"$TopicA/B", False),
    (b"+/+", b"$TopicA/B", False),
    (b"+/#", b"$TopicA/B", False),
    (b"+/B", b"$TopicA/B", False),
    (b"+", b"$TopicA", False),
    (b"$TopicA/+", b"$TopicA/B", True),
    (b"$TopicA/#", b"$TopicA/B", True),
    (b"+/+", b"TopicA/B", True),
    (b"#", b"TopicA/$B", True),
    (b"TopicA/+", b"TopicA/$B", True),
]


class Recorder:
    """The connection and JetStream sides a delivery touches."""

    def __init__(self) -> None:
        self.sent: list[mqtt.Packet] = []
        self.acks: list[tuple[bytes, bytes]] = []

    def deliver(self, data: bytes, _size: int) -> None:
        self.sent += mqtt.Decoder(server=False).receive(data)

    def publish(self, subject: bytes, payload: bytes) -> None:
        self.acks.append((subject, payload))


def topics(rec: Recorder) -> list[bytes]:
    return [p.topic for p in rec.sent if isinstance(p, mqtt.Publish)]


def subject_of(topic: bytes) -> bytes:
    return filter_subjects(topic)[0]


@pytest.mark.parametrize(("topic_filter", "topic", "delivered"), CASES)
def test_live_subscription(topic_filter: bytes, topic: bytes, delivered: bool) -> None:
    """QoS 0 deliveries and NATS publishes: the router calls every matching subscription."""
    rec = Recorder()
    published = subject_of(topic)
    for qos in (0, 1):  # a QoS 1 subscription takes NATS publishes (no Nmqtt-Pub) live too
        for subject in filter_subjects(topic_filter):
            if subject_matches(subject.decode(), published.decode()):  # as the router would
                sub = MQTTSubscription(rec, topic_filter, subject.decode(), qos)  # type: ignore[arg-type]
                sub.deliver(published, b"", None, b"x")
    assert topics(rec) == ([topic] * 2 if delivered else [])


@pytest.mark.parametrize(("topic_filter", "topic", "delivered"), CASES)
def test_retained_on_subscribe(topic_filter: bytes, topic: bytes, delivered: bool) -> None:
    store = RetainedStore(None, "origin")  # type: ignore[arg-type]
    store.msgs[subject_of(topic).decode()] = RetainedMsg(topic, b"x", 1)
    rec = Recorder()
    got = [
        msg.topic
        for subject in filter_subjects(topic_filter)
        for msg in store.matching(
            subject.decode(),
            reserved=MQTTSubscription(rec, topic_filter, subject.decode(), 1).reserved,  # type: ignore[arg-type]
        )
    ]
    assert got == ([topic] if delivered else [])


@pytest.mark.parametrize(("topic_filter", "topic", "delivered"), CASES)
@pytest.mark.parametrize("qos", [1, 2])
def test_consumer_delivery(topic_filter: bytes, topic: bytes, delivered: bool, qos: int) -> None:
    """QoS 1 and 2 reach a QoS ≥ 1 subscription through its consumer, whose NATS filter
    (`>`, `*.*`) matches `$` subjects: those are acknowledged and not sent."""
    rec = Recorder()
    manager: Any = SimpleNamespace(jsa=rec)
    session = Session(manager, "client", "hash", clean=True)
    session.conn = rec  # type: ignore[assignment]
    subject = filter_subjects(topic_filter)[0].decode()
    session.cons[subject] = {"durable_name": "dur", "_qos": 2}
    reply = b"$JS.ACK.$MQTT_msgs.dur.1.7.7.1700000000000000000.0"
    hdr = b"NATS/1.0\r\nNmqtt-Pub:%d\r\n\r\n" % qos
    session._on_delivery(MSGS_PREFIX.encode() + subject_of(topic), reply, hdr, b"x")
    if delivered:
        assert topics(rec) == [topic] and rec.acks == []
        assert [p.qos for p in rec.sent] == [qos]  # type: ignore[attr-defined]
    else:
        assert rec.sent == [] and rec.acks == [(reply, b"+ACK")]
