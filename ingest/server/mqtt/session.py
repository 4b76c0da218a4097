"""One MQTT session: its subscriptions, its QoS ≥ 1 consumers and its packets in flight.

A QoS ≥ 1 subscription is a durable consumer on `$MQTT_msgs` pushing to an
internal `$MQTT.sub.<id>` subject; the session owns that subject only while a
connection is attached, so a persistent session's consumer holds messages
while the client is away. Every unacknowledged delivery is NAKed when the
connection goes, so a reconnect gets it again at once, marked DUP (MQTT 3.1.1
§4.4; the reference waits for `ack_wait`).
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import TYPE_CHECKING, Any

from ingest.parser import mqtt
from ingest.parser.headers import encode_headers, header_value
from ingest.parser.mqtt_topics import skips_reserved, to_topic
from ingest.server.mqtt.jsa import JetStreamError
from ingest.server.mqtt.subscriptions import nats_subjects, published_qos, topic_of

if TYPE_CHECKING:
    from ingest.server.mqtt.connection import MQTTConnection
    from ingest.server.mqtt.sessions import SessionManager

log = logging.getLogger("jetlake")

MSGS_STREAM = "$MQTT_msgs"
MSGS_PREFIX = "$MQTT.msgs."
MSGS_PREFIX_BYTES = MSGS_PREFIX.encode()
SESS_PREFIX = "$MQTT.sess."
QOS2_STREAM = "$MQTT_qos2in"
QOS2_PREFIX = "$MQTT.qos2.in."
DEFAULT_ACK_WAIT = 30.0
DEFAULT_MAX_ACK_PENDING = 1024
# A session's consumers together may hold no more unacknowledged messages than there
# are packet identifiers: past that a PUBLISH would have none to carry.
MAX_ACK_PENDING_TOTAL = 0xFFFF


class PendingBudgetError(JetStreamError):
    """A subscription refused before any request: its consumer's `max_ack_pending`
    would take the session's consumers past `MAX_ACK_PENDING_TOTAL`."""


def filter_of(subject: str) -> bytes:
    """The topic filter a stored NATS subject came from (`a.>` ↔ `a/#`)."""
    levels = to_topic(subject.encode()).split(b"/")
    return b"/".join({b"*": b"+", b">": b"#"}.get(level, level) for level in levels)


class Session:
    def __init__(
        self, manager: SessionManager, client_id: str, id_hash: str, *, clean: bool
    ) -> None:
        self.manager = manager
        self.client_id = client_id
        self.id_hash = id_hash
        self.clean = clean
        self.moved = False  # its client id was taken over by another server of the cluster
        self.conn: MQTTConnection | None = None
        self.subs: dict[str, int] = {}  # NATS subject -> granted QoS (persisted)
        self.cons: dict[str, dict[str, Any]] = {}  # NATS subject -> consumer config
        self._delivery_subs: dict[str, object] = {}  # deliver subject -> token
        self._pending: dict[int, bytes | None] = {}  # packet id -> JS ack subject
        # A resend keeps its first packet id ([MQTT-4.3.2]): ids by (consumer, stream seq).
        self._pid_of: dict[tuple[bytes, bytes], int] = {}
        self._pubrel: set[int] = set()  # PUBREL sent, PUBCOMP awaited
        # Until PUBREL: (subject, packet, its sequence in `$MQTT_qos2in`, 0 while stored).
        self._qos2_in: dict[int, tuple[str, mqtt.Publish, int]] = {}
        self._next_pid = 0

    # ---- persistence ----------------------------------------------------------------------

    def restore(self, doc: dict[str, Any]) -> None:
        self.subs = {str(k): int(v) for k, v in doc.get("subs", {}).items()}
        self.cons = dict(doc.get("cons", {}))
        self._pubrel = {int(pid) for pid in doc.get("pubrel_pending", ())}

    async def save(self) -> None:
        if self.clean:
            return
        doc = {
            "origin": self.manager.origin,
            "id": self.client_id,
            "subs": self.subs,
            "cons": self.cons,
        }
        if self._pubrel:  # jetlake's: PUBRELs owed survive a restart without a consumer
            doc["pubrel_pending"] = sorted(self._pubrel)
        subject = self.manager.sess_prefix + self.id_hash
        await self.manager.jsa.request(subject, json.dumps(doc).encode())

    async def destroy(self, *, records: bool = True) -> None:
        """Forget the session: its consumers, and with `records` its record and the QoS 2
        messages awaiting PUBREL (shared by id: another server's session may own them)."""
        for subject in list(self.cons):
            await self._drop_consumer(subject)
        self.subs.clear()
        self._qos2_in.clear()
        if not records:
            return
        purge = self.manager.jsa.request
        record = self.manager.sess_prefix + self.id_hash
        await purge("$JS.API.STREAM.PURGE.$MQTT_sess", {"filter": record})
        await purge(
            f"$JS.API.STREAM.PURGE.{QOS2_STREAM}", {"filter": f"{QOS2_PREFIX}{self.id_hash}.*"}
        )

    # ---- connection -----------------------------------------------------------------------

    def attach(self, conn: MQTTConnection) -> None:
        self.conn = conn
        if self.subs:
            filters = {filter_of(s): q for s, q in self.subs.items()}
            conn.filters.add(tuple(filters.items()))
        for cfg in self.cons.values():
            self._listen(cfg["deliver_subject"])
        for pid in sorted(self._pubrel):
            conn.queue(mqtt.encode(mqtt.PubRel(pid)))

    def detach(self, conn: MQTTConnection) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        for token in self._delivery_subs.values():
            self.manager.server.unsubscribe(token)
        self._delivery_subs.clear()
        for pid, ack in list(self._pending.items()):
            if ack is None:  # a retained message: not resent
                del self._pending[pid]
            else:
                self.manager.jsa.publish(ack, b"-NAK")
        self.manager.detached(self)

    # ---- publishes from the client ---------------------------------------------------------

    async def publish(self, packet: mqtt.Publish, subject: str, *, allowed: bool) -> None:
        conn = self.conn
        if packet.qos == 2:
            if packet.packet_id not in self._qos2_in:
                self._qos2_in[packet.packet_id] = (subject, packet, 0)
                seq = await self._hold(subject, packet)
                self._qos2_in[packet.packet_id] = (subject, packet, seq)
            if conn is not None:
                conn.queue(mqtt.encode(mqtt.PubRec(packet.packet_id)))
            return
        await self.manager.publish(subject, packet, allowed=allowed)
        if packet.qos == 1 and conn is not None:
            conn.queue(mqtt.encode_ack(mqtt.PUBACK, packet.packet_id))

    def publish_at_least_once(self, packet: mqtt.Publish, subject: bytes, *, allowed: bool) -> None:
        """QoS 1 without retain, the common case: PUBACK once JetStream holds the message.

        `publish` does the same as a task; here nothing is awaited, so nothing is
        scheduled per message (JetStream answers in publish order: PUBACKs keep it).
        """
        conn = self.conn
        puback = mqtt.encode_ack(mqtt.PUBACK, packet.packet_id)

        def stored(_: bytes) -> None:
            if conn is not None:
                conn.queue(puback)

        if allowed:
            self.manager.store(subject, packet, stored)
        else:
            stored(b"")

    async def on_pubrel(self, pid: int) -> None:
        """Release a held QoS 2 message: stored for subscribers before it is forgotten, so
        a release cut short (a kill, a stream without a leader yet) is done again by the
        PUBREL the client sends again, on any server; the stored copy's Nats-Msg-Id, the
        held message's sequence, keeps it one message."""
        held = self._qos2_in.get(pid)
        if held is not None:
            subject, packet, seq = held
            conn = self.conn
            allowed = (
                conn is None
                or not conn.grant.restricted
                or conn.grant.can_publish(subject.encode())
            )
            msg_id = f"{QOS2_STREAM}.{seq}" if seq else ""
            await self.manager.publish(subject, packet, allowed=allowed, msg_id=msg_id)
            self._qos2_in.pop(pid, None)
            await self.manager.jsa.request(
                f"$JS.API.STREAM.PURGE.{QOS2_STREAM}", {"filter": self._held_subject(pid)}
            )
        if self.conn is not None:
            self.conn.queue(mqtt.encode(mqtt.PubComp(pid)))

    def _held_subject(self, pid: int) -> str:
        return f"{QOS2_PREFIX}{self.id_hash}.{pid}"

    async def _hold(self, subject: str, packet: mqtt.Publish) -> int:
        """Keep a QoS 2 message in `$MQTT_qos2in` until its PUBREL, across restarts; its
        sequence there."""
        hdr = encode_headers(
            {
                "Nmqtt-Pub": "2",
                "Nmqtt-Subject": subject,
                "Nmqtt-Topic": packet.topic.decode(),
                "Nmqtt-Retain": "1" if packet.retain else "0",
            }
        )
        answer = await self.manager.jsa.request(
            self._held_subject(packet.packet_id), packet.payload, hdr
        )
        return int(answer.get("seq") or 0)

    async def restore_held(self) -> None:
        """QoS 2 messages received before a restart (or by another server of the cluster)
        whose PUBREL has not come yet."""
        prefix = f"{QOS2_PREFIX}{self.id_hash}."
        jsa = self.manager.jsa
        for name in await jsa.subjects(QOS2_STREAM, prefix + "*"):
            found = await jsa.last_msg(QOS2_STREAM, name)
            if found is None:
                continue
            subject = header_value(found.hdr, b"Nmqtt-Subject")
            topic = header_value(found.hdr, b"Nmqtt-Topic")
            pid = name[len(prefix) :]
            if subject is None or topic is None or not pid.isdigit():
                continue
            retain = header_value(found.hdr, b"Nmqtt-Retain") == b"1"
            packet = mqtt.Publish(topic, found.data, 2, retain, False, int(pid))
            self._qos2_in[int(pid)] = (subject.decode(), packet, found.seq)

    # ---- subscriptions ---------------------------------------------------------------------

    async def subscribe(
        self, filters: tuple[tuple[bytes, int], ...], codes: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The consumers the filters need; the SUBACK's codes. A filter JetStream refuses
        a consumer for (the stream's consumer limit, say), or whose consumers would
        take the session past `MAX_ACK_PENDING_TOTAL` (the 64th QoS 1 filter at the
        default 1024 each), is refused in the SUBACK (0x80), as on the reference, and
        the rest of the packet and the session go on."""
        final = list(codes)
        for n, ((topic_filter, _), granted) in enumerate(zip(filters, codes, strict=True)):
            if granted == mqtt.SUBACK_FAILURE:
                continue
            made: list[str] = []
            try:
                for subject in nats_subjects(topic_filter) or ():
                    if granted and subject not in self.cons:
                        await self._add_consumer(subject, granted)
                        made.append(subject)
                    elif granted:
                        self.cons[subject]["_qos"] = granted
                    elif subject in self.cons:
                        await self._drop_consumer(subject)
            except JetStreamError as exc:
                log.error("MQTT: client %r, subscription %r refused: %s", self.client_id,
                          topic_filter.decode(errors="replace"), exc)  # fmt: skip
                for subject in made:  # a filter is one subject or two (`a/#`): none of it
                    await self._drop_consumer(subject)
                final[n] = mqtt.SUBACK_FAILURE
                continue
            main = (nats_subjects(topic_filter) or ("",))[0]
            self.subs[main] = granted
        await self.save()
        return tuple(final)

    async def unsubscribe(self, filters: tuple[bytes, ...]) -> None:
        for topic_filter in filters:
            subjects = nats_subjects(topic_filter) or ()
            for subject in subjects:
                if subject in self.cons:
                    await self._drop_consumer(subject)
            if subjects:
                self.subs.pop(subjects[0], None)
        await self.save()

    async def _add_consumer(self, subject: str, qos: int) -> None:
        mopts = self.manager.config
        pending = mopts.max_ack_pending or DEFAULT_MAX_ACK_PENDING
        held = (cfg.get("max_ack_pending") or DEFAULT_MAX_ACK_PENDING for cfg in self.cons.values())
        after = pending + sum(held)  # a stored session's consumer may not say
        if after > MAX_ACK_PENDING_TOTAL:
            raise PendingBudgetError(
                f"max_ack_pending for all consumers would be {after} which exceeds "
                f"the limit of {MAX_ACK_PENDING_TOTAL}"
            )
        nuid = secrets.token_urlsafe(16).replace("-", "A").replace("_", "B")
        cfg: dict[str, Any] = {
            "durable_name": f"{self.id_hash}_{nuid}",
            "deliver_policy": "new",
            "ack_policy": "explicit",
            "ack_wait": round((mopts.ack_wait or DEFAULT_ACK_WAIT) * 1e9),
            "filter_subject": MSGS_PREFIX + subject,
            "replay_policy": "instant",
            "max_ack_pending": pending,
            "deliver_subject": f"$MQTT.sub.{nuid}",
        }
        if mopts.consumer_memory_storage:
            cfg["mem_storage"] = True
        if mopts.consumer_inactive_threshold:
            cfg["inactive_threshold"] = round(mopts.consumer_inactive_threshold * 1e9)
        await self.manager.jsa.request(
            f"$JS.API.CONSUMER.DURABLE.CREATE.{MSGS_STREAM}.{cfg['durable_name']}",
            {"stream_name": MSGS_STREAM, "config": cfg},
        )
        self.cons[subject] = {**cfg, "_qos": qos}
        if self.conn is not None:
            self._listen(cfg["deliver_subject"])

    async def _drop_consumer(self, subject: str) -> None:
        cfg = self.cons.pop(subject)
        token = self._delivery_subs.pop(cfg["deliver_subject"], None)
        if token is not None:
            self.manager.server.unsubscribe(token)
        await self.manager.jsa.request(
            f"$JS.API.CONSUMER.DELETE.{MSGS_STREAM}.{cfg['durable_name']}"
        )

    def inboxes(self) -> list[str]:
        """Subjects on which this session's consumers deliver to its connection."""
        return list(self._delivery_subs)

    def _listen(self, deliver_subject: str) -> None:
        if deliver_subject not in self._delivery_subs:
            token = self.manager.server.subscribe_raw(
                deliver_subject, self._on_delivery, account=self.manager.account
            )
            self.manager.server.announce(token)  # the consumer may run on another server
            self._delivery_subs[deliver_subject] = token

    # ---- deliveries to the client ----------------------------------------------------------

    def _on_delivery(self, subject: bytes, reply: bytes, hdr: bytes | None, data: bytes) -> None:
        """A stored QoS ≥ 1 message from a consumer: PUBLISH it with a packet id."""
        conn = self.conn
        if conn is None or not reply or not subject.startswith(MSGS_PREFIX_BYTES):
            return
        tokens = reply.split(b".", 6)  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.…
        stored = subject[len(MSGS_PREFIX_BYTES) :]
        filter_subject, sub_qos = self._consumer(tokens[3].decode() if len(tokens) > 3 else "")
        if stored[:1] == b"$" and skips_reserved(filter_subject.encode()):
            # [MQTT-4.7.2-1]: a leading wildcard does not match a `$` topic, yet the
            # consumer's filter (`>`, `*.*`) does; acked, or it would come back.
            self.manager.jsa.publish(reply, b"+ACK")
            return
        qos = min(published_qos(hdr) or 1, sub_qos)
        dup = len(tokens) > 4 and tokens[4] != b"1"
        key = (tokens[3], tokens[5]) if len(tokens) > 5 else None
        pid = self._pid_of.get(key) if key else None
        if pid is not None and pid in self._pending:
            self._pending[pid] = reply
        else:
            pid = self._allocate(reply)
            if key:
                self._pid_of[key] = pid
        topic = topic_of(stored)
        conn.deliver(mqtt.encode_publish(topic, data, qos=qos, dup=dup, packet_id=pid), len(data))

    def _consumer(self, durable: str) -> tuple[str, int]:
        """The NATS subject and granted QoS of the subscription whose consumer is `durable`."""
        for subject, cfg in self.cons.items():
            if cfg["durable_name"] == durable:
                return subject, int(cfg.get("_qos", 1))
        return "", 1

    def send_retained(self, topic: bytes, payload: bytes, qos: int) -> None:
        conn = self.conn
        if conn is None:
            return
        pid = self._allocate(None) if qos else 0
        conn.deliver(
            mqtt.encode_publish(topic, payload, qos=qos, retain=True, packet_id=pid), len(payload)
        )

    def _allocate(self, ack: bytes | None) -> int:
        for _ in range(65535):
            self._next_pid = self._next_pid % 65535 + 1
            if self._next_pid not in self._pending and self._next_pid not in self._pubrel:
                self._pending[self._next_pid] = ack
                return self._next_pid
        raise mqtt.ProtocolError("no free packet identifier: the client acknowledges nothing")

    def on_puback(self, pid: int) -> None:
        ack = self._pending.pop(pid, None)
        if ack is not None:
            self.manager.jsa.publish(ack, b"+ACK")
            tokens = ack.split(b".", 6)
            self._pid_of.pop((tokens[3], tokens[5]), None)

    async def on_pubrec(self, pid: int) -> None:
        """The stored message is delivered; the PUBREL owed is recorded before it is sent."""
        self.on_puback(pid)
        if pid not in self._pubrel:
            self._pubrel.add(pid)
            await self.save()
        if self.conn is not None:
            self.conn.queue(mqtt.encode(mqtt.PubRel(pid)))

    def on_pubcomp(self, pid: int) -> None:
        if pid in self._pubrel:
            self._pubrel.discard(pid)
            self.manager.spawn(self.save())
