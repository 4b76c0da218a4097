"""An MQTT connection's subscriptions, as entries of the server's subject trie.

Each topic filter becomes one or two NATS subscriptions (`a/#` also needs `a`)
that the router calls like any other, so NATS publishes reach MQTT clients at
QoS 0 with no bridge in between. A message an MQTT client published at QoS 1
or 2 reaches a QoS ≥ 1 subscription through the session's JetStream consumer
instead, so here it is skipped (it would otherwise arrive twice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.parser import mqtt
from ingest.parser.mqtt_topics import (
    TopicError,
    filter_subjects,
    is_valid_filter,
    skips_reserved,
    to_subject,
    to_topic,
)
from ingest.parser.subjects import is_valid_subject

if TYPE_CHECKING:
    from ingest.server.mqtt.connection import MQTTConnection

RESERVED_PREFIX = "$MQTT."
_QOS_MARK = b"\r\nNmqtt-Pub:"
MEMO_SIZE = 4096
MEMO_LONGEST = 256


def _memo(convert: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """`convert`, remembered for short names: devices publish to a few topics over and over,
    and converting costs more than a lookup. Long names are not kept, so memory stays small;
    an error is not kept either (it is raised again)."""
    memo: dict[bytes, bytes] = {}

    def converted(name: bytes) -> bytes:
        value = memo.get(name)
        if value is None:
            value = convert(name)
            if len(name) <= MEMO_LONGEST:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                memo[name] = value
        return value

    return converted


subject_of = _memo(to_subject)
"""The NATS subject of a PUBLISH's topic (a `TopicError` when it has none)."""
topic_of = _memo(to_topic)
"""The MQTT topic of a NATS subject."""


def published_qos(hdr: bytes | None) -> int:
    """The QoS an MQTT publisher used, from the `Nmqtt-Pub` header (0 for NATS publishes)."""
    if hdr is None:
        return 0
    at = hdr.find(_QOS_MARK)
    if at < 0 or at + len(_QOS_MARK) >= len(hdr):
        return 0
    digit = hdr[at + len(_QOS_MARK)] - 48
    return digit if 0 <= digit <= 2 else 0


class MQTTSubscription:
    """One NATS subject of a topic filter; the router calls `deliver`."""

    __slots__ = ("conn", "delivered", "qos", "queue", "reserved", "subject", "topic_filter")
    max_msgs = 0  # for /connz, as a NATS subscription

    def __init__(self, conn: MQTTConnection, topic_filter: bytes, subject: str, qos: int) -> None:
        self.conn = conn
        self.topic_filter = topic_filter
        self.subject = subject
        self.qos = qos
        self.queue = None
        self.reserved = skips_reserved(subject.encode())
        self.delivered = 0

    @property
    def sid(self) -> str:
        return self.subject

    def deliver(self, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        if self.reserved and subject[:1] == b"$":
            return  # [MQTT-4.7.2-1]: leading wildcards do not match `$` topics
        if self.qos and published_qos(hdr):
            return  # the session's consumer delivers it, at the right QoS
        self.delivered += 1
        self.conn.deliver(mqtt.encode_publish(topic_of(subject), payload), len(payload))


def nats_subjects(topic_filter: bytes) -> tuple[str, ...] | None:
    """The NATS subjects of a filter, or None when it cannot be subscribed to."""
    if not is_valid_filter(topic_filter):
        return None
    try:
        subjects = tuple(s.decode() for s in filter_subjects(topic_filter))
    except TopicError:
        return None
    if any(not is_valid_subject(s) or s.startswith(RESERVED_PREFIX) for s in subjects):
        return None
    return subjects


class SubscriptionSet:
    """Filters of one connection; a filter subscribed again only changes its QoS."""

    def __init__(self, conn: MQTTConnection) -> None:
        self.conn = conn
        self.by_filter: dict[bytes, list[MQTTSubscription]] = {}

    def add(self, filters: tuple[tuple[bytes, int], ...]) -> tuple[int, ...]:
        """Subscribe; the SUBACK codes (granted QoS, or 0x80 for a refused filter)."""
        codes: list[int] = []
        grant = self.conn.grant
        sublist = self.conn.account.sublist
        for topic_filter, qos in filters:
            subjects = nats_subjects(topic_filter)
            if subjects is None or (
                grant.restricted and not all(grant.can_subscribe(s) for s in subjects)
            ):
                codes.append(mqtt.SUBACK_FAILURE)
                continue
            existing = self.by_filter.get(topic_filter)
            if existing is not None:
                for sub in existing:
                    sub.qos = qos
            else:
                subs = [MQTTSubscription(self.conn, topic_filter, s, qos) for s in subjects]
                for sub in subs:
                    sublist.insert(sub.subject, None, sub)
                    self._interest(sub.subject, added=True)
                self.by_filter[topic_filter] = subs
            codes.append(qos)
        return tuple(codes)

    def remove(self, filters: tuple[bytes, ...]) -> None:
        sublist = self.conn.account.sublist
        for topic_filter in filters:
            for sub in self.by_filter.pop(topic_filter, []):
                sublist.remove(sub.subject, None, sub)
                self._interest(sub.subject, added=False)

    def _interest(self, subject: str, *, added: bool) -> None:
        """Tell the cluster's other servers, so what is published there reaches this client."""
        server = self.conn.server
        if server.cluster is None:
            return
        account = self.conn.account.name
        if added:
            server.cluster.local_added(subject, None, account)
        else:
            server.cluster.local_removed(subject, None, account)

    def clear(self) -> None:
        self.remove(tuple(self.by_filter))

    def all(self) -> list[MQTTSubscription]:
        return [sub for subs in self.by_filter.values() for sub in subs]
