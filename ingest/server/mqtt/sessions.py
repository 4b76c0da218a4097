"""The MQTT state of one account: its streams, the sessions by client id, the publish path.

The five streams are the reference's (names, subjects, retention), created
through the account's JetStream API when its first MQTT client logs in (the
global account's when the listener starts), so a jetlake store and a reference
store hold MQTT state the same way. Everything here (API requests, routing,
internal subscriptions) stays inside the account, so two accounts' MQTT clients
share nothing. A session is found again by the hash of its client id
(`$MQTT.sess.<hash>`, the reference's hash).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ingest.parser import mqtt
from ingest.server.mqtt import retained
from ingest.server.mqtt.connection import PUBLISH_HEADERS
from ingest.server.mqtt.jsa import JetStreamError, JSAccess
from ingest.server.mqtt.session import (
    MSGS_PREFIX,
    MSGS_PREFIX_BYTES,
    QOS2_PREFIX,
    QOS2_STREAM,
    SESS_PREFIX,
    Session,
)
from ingest.server.settings import MQTTConfig

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.mqtt.connection import MQTTConnection
    from ingest.server.mqtt.listener import MQTTListener
    from ingest.server.server import Server

log = logging.getLogger("jetlake")

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def name_hash(name: str) -> str:
    """8 characters from SHA-256, as the reference names sessions and server nodes."""
    return "".join(_DIGITS[b % 62] for b in hashlib.sha256(name.encode()).digest()[:8])


def _stream(name: str, subject: str, retention: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "subjects": [subject], "retention": retention, **extra}


STREAMS = (
    _stream("$MQTT_sess", SESS_PREFIX + ">", "limits", max_msgs_per_subject=1),
    _stream("$MQTT_msgs", MSGS_PREFIX + ">", "interest"),
    _stream(retained.STREAM, retained.PREFIX + ">", "limits", max_msgs_per_subject=1),
    _stream(QOS2_STREAM, QOS2_PREFIX + ">", "limits", max_msgs_per_subject=1, discard="new"),
    _stream("$MQTT_out", "$MQTT.out.>", "interest"),
)


STREAM_NOT_FOUND = 10059
NOT_ENABLED = 10039  # the account has no JetStream: nothing to wait for
TAKEOVER_PREFIX = "$MQTT.takeover."  # outside every MQTT stream's subjects
_START_PATIENCE = 60.0  # seconds a cluster may take to elect the leader MQTT's streams need


def _default_replicas(server: Server) -> int:
    """The reference's default: as many replicas as servers, at most 3 (1 when standalone)."""
    if server.jetstream_cluster is None:
        return 1
    return max(1, min(3, server.jetstream_cluster.expected_size))


def _lost(exc: JetStreamError | None) -> None:
    """A QoS 1 message JetStream did not confirm: no PUBACK, so the client sends it again."""
    if exc is not None:
        log.error("MQTT: %s", exc)


class SessionManager:
    def __init__(self, listener: MQTTListener, account: Account) -> None:
        self.listener = listener
        self.server = server = listener.server
        self.account = account
        self.origin = name_hash(server.server_name)
        self.jsa = JSAccess(server, self.origin, listener.config.js_api_timeout, account)
        # A server in a JetStream domain keeps sessions under `$MQTT.sess.<domain>.`,
        # as the reference does, so a store it made is read back as it wrote it.
        domain = server.opts.jetstream.domain
        self.sess_prefix = f"{SESS_PREFIX}{domain}." if domain else SESS_PREFIX
        self.retained = retained.RetainedStore(self.jsa, self.origin)
        self.sessions: dict[str, Session] = {}  # persistent sessions known in this run
        self.live: dict[str, MQTTConnection] = {}  # client id -> its connection
        self.spawn = listener.spawn
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A client connecting to another server of the cluster takes its id over from here.
        self._takeovers: object | None = server.subscribe_raw(
            TAKEOVER_PREFIX + "*", self._taken, account=account
        )
        server.announce(self._takeovers)

    @property
    def config(self) -> MQTTConfig:
        """The listener's settings, which a config reload replaces."""
        return self.listener.config

    async def start(self) -> None:
        """Standalone, the streams are ready when the server is; on a cluster they need a
        meta leader, which needs the other servers, so they are made in the background
        and a client's CONNECT waits for them (the reference's order too)."""
        if self.server.jetstream_cluster is None:
            await self._prepare()
            self._ready.set_result(None)
            return
        self.begin()

    def begin(self) -> None:
        """Make the streams in the background; CONNECTs wait for them."""
        self.spawn(self._prepared())

    async def _prepared(self) -> None:
        try:
            await self._prepare()
        except JetStreamError as exc:  # the CONNECTs waiting log it
            self._ready.set_exception(exc)
            self._ready.exception()  # retrieved, should none be waiting
            self.listener.failed(self)
            return
        self._ready.set_result(None)

    async def _prepare(self) -> None:
        """Create the streams (retrying while a cluster has no meta leader), then read back
        the retained messages."""
        replicas = self.config.stream_replicas or _default_replicas(self.server)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_PATIENCE
        for doc in STREAMS:
            if doc["name"] == "$MQTT_sess":
                doc = {**doc, "subjects": [self.sess_prefix + ">"]}
            while not await self._stream_made(doc, replicas):
                if loop.time() > deadline:
                    raise JetStreamError(f"MQTT stream {doc['name']} could not be created")
                await asyncio.sleep(0.25)
        await self.retained.load()

    async def _stream_made(self, doc: dict[str, Any], replicas: int) -> bool:
        """Whether the stream exists, creating it when it does not. Asked first, as every
        server of a cluster makes the same streams at start (a creation that raced another
        server's is then seen on the next try)."""
        name = doc["name"]
        try:
            await self.jsa.request("$JS.API.STREAM.INFO." + name)
            return True
        except JetStreamError as exc:
            if exc.code == NOT_ENABLED and not self.account.jetstream_enabled:
                # (enabled but refusing: its engine is still starting, a fetched account's)
                why = str(exc).rpartition(": ")[2]
                raise JetStreamError(
                    f'create {name} stream for account "{self.account.name}": {why} ({exc.code})',
                    exc.code,
                ) from None
            if exc.code != STREAM_NOT_FOUND:  # no meta leader yet, or no answer in time
                log.debug("MQTT: %s; trying again", exc)
                return False
        try:
            await self.jsa.request(
                "$JS.API.STREAM.CREATE." + name, {**doc, "num_replicas": replicas}
            )
        except JetStreamError as exc:
            if "already in use" not in str(exc):
                log.debug("MQTT: %s; trying again", exc)
                return False
        return True

    def stop(self) -> None:
        self.retained.close()
        if self._takeovers is not None:
            self.server.unsubscribe(self._takeovers)
            self._takeovers = None
        self.jsa.close()

    # ---- sessions -------------------------------------------------------------------------

    async def connect(
        self, conn: MQTTConnection, clean: bool, ready: Callable[[Session, bool], None]
    ) -> None:
        await asyncio.shield(self._ready)
        client_id = conn.client_id
        old = self.live.get(client_id)
        if old is not None and old is not conn:
            old.close("Duplicate Client ID")  # takeover: no Will ([MQTT-3.1.4-2])
        self.live[client_id] = conn
        id_hash = name_hash(client_id)
        if self.server.cluster is not None:
            notice = json.dumps({"id": client_id, "origin": self.origin}).encode()
            self.jsa.publish((TAKEOVER_PREFIX + id_hash).encode(), notice)
        session = self.sessions.pop(client_id, None) or await self._load(client_id, id_hash)
        present = session is not None and not clean
        if clean and session is not None:
            await session.destroy()
        if session is None or clean:
            session = Session(self, client_id, id_hash, clean=clean)
            await session.save()
        if not clean:
            self.sessions[client_id] = session
        ready(session, present)

    async def _load(self, client_id: str, id_hash: str) -> Session | None:
        """A session saved by this server or (on a cluster) any other, through the API."""
        found = await self.jsa.last_msg("$MQTT_sess", self.sess_prefix + id_hash)
        if found is None or not found.data:
            return None
        doc = json.loads(found.data)
        if doc.get("id") != client_id:
            return None
        session = Session(self, client_id, id_hash, clean=False)
        session.restore(doc)
        await session.restore_held()
        return session

    def _taken(self, subject: bytes, reply: bytes, hdr: bytes | None, data: bytes) -> None:
        """Another server accepted this client id: close it here, and forget the copy of its
        session held here (the stream has the one that counts from now on)."""
        try:
            notice = json.loads(data)
        except ValueError:
            return
        if not isinstance(notice, dict) or notice.get("origin") == self.origin:
            return
        client_id = str(notice.get("id"))
        self.sessions.pop(client_id, None)
        conn = self.live.pop(client_id, None)
        if conn is not None:
            if conn.session is not None:
                conn.session.moved = True
            conn.close("Duplicate Client ID")

    def detached(self, session: Session) -> None:
        if session.clean:  # its records, unless its id lives on another server now
            self.spawn(session.destroy(records=not session.moved))

    def closed(self, conn: MQTTConnection) -> None:
        if self.live.get(conn.client_id) is conn:
            del self.live[conn.client_id]

    # ---- publishing -----------------------------------------------------------------------

    def _route(self, subject: bytes, packet: mqtt.Publish) -> bytes:
        """To NATS and MQTT subscribers; the header block, which is stored with it too."""
        hdr = PUBLISH_HEADERS[packet.qos]
        size = len(hdr) + len(packet.payload)
        self.server.route(None, subject, b"", hdr, packet.payload, size, account=self.account)
        return hdr

    def store(self, subject: bytes, packet: mqtt.Publish, stored: Callable[[bytes], None]) -> None:
        """Route a QoS ≥ 1 message and keep it for consumers; `stored` gets JetStream's
        answer once it holds the message (a failure is logged, `stored` not called).

        Callbacks rather than a task: this is the path of every QoS 1 publish.
        """
        hdr = self._route(subject, packet)
        self.jsa.send(MSGS_PREFIX_BYTES + subject, packet.payload, hdr, stored, _lost)

    async def publish(
        self, subject: str, packet: mqtt.Publish, *, allowed: bool, msg_id: str = ""
    ) -> None:
        """Route, store QoS ≥ 1 and retain, awaited (QoS 2 releases, Wills, retained).
        `msg_id` goes on the stored copy alone: JetStream stores a release once however
        often it is sent."""
        if not allowed:
            return
        raw = subject.encode()
        hdr = self._route(raw, packet)
        payload = packet.payload
        waits: list[Awaitable[Any]] = []
        if packet.qos:
            stored = hdr[:-2] + b"Nats-Msg-Id: %s\r\n\r\n" % msg_id.encode() if msg_id else hdr
            waits.append(self.jsa.answer(MSGS_PREFIX_BYTES + raw, payload, stored))
        if packet.retain:
            waits.append(self.retained.put(subject, packet.topic, payload, packet.qos))
        if waits:
            await asyncio.gather(*waits)

    def publish_will(self, will: mqtt.Will, subject: str, *, allowed: bool) -> None:
        packet = mqtt.Publish(will.topic, will.message, will.qos, will.retain)
        self.spawn(self.publish(subject, packet, allowed=allowed))
