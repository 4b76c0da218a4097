"""One MQTT client connection: an asyncio Protocol around the sans-IO MQTT codec.

MQTT publishes are routed through the core server exactly like NATS
publishes (mapped subject, `Nmqtt-Pub` header), so NATS subscribers, JetStream
streams and MQTT subscribers all see them; MQTT subscriptions sit in the same
subject trie as NATS ones. Output is queued and flushed once per loop turn,
like a NATS client's.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.parser import mqtt
from ingest.parser.mqtt_topics import TopicError, to_subject
from ingest.server.accounts import limits
from ingest.server.auth.authenticator import AuthError, Grant
from ingest.server.closing import Closing
from ingest.server.mqtt.jsa import JetStreamError
from ingest.server.mqtt.subscriptions import SubscriptionSet, subject_of

if TYPE_CHECKING:
    from ingest.server.mqtt.listener import MQTTListener
    from ingest.server.mqtt.session import Session
    from ingest.server.mqtt.sessions import SessionManager

log = logging.getLogger("jetlake")

# What the reference adds in front of a message an MQTT client publishes.
HEADER_PREFIX = b"NATS/1.0\r\nNmqtt-Pub:"
HEADER_SIZE = len(HEADER_PREFIX) + 5  # the QoS digit and two CRLFs


PUBLISH_HEADERS = tuple(HEADER_PREFIX + b"%d\r\n\r\n" % qos for qos in range(3))
"""By QoS: the same few bytes on every publish, built once."""


@dataclass(frozen=True, slots=True)
class Inbox:
    """A consumer's delivery subscription, shaped for /connz like a NATS subscription."""

    subject: str
    queue: None = None
    delivered: int = 0
    max_msgs: int = 0

    @property
    def sid(self) -> str:
        return self.subject


class MQTTConnection(Closing, asyncio.Protocol):
    """State of one MQTT network connection (its session outlives it when persistent)."""

    def __init__(self, listener: MQTTListener, cid: int) -> None:
        self.listener = listener
        self.server = listener.server
        self.cid = cid
        self.decoder = mqtt.Decoder(max_packet=self.server.opts.max_payload)
        self.transport: asyncio.Transport | None = None
        self.client_id = ""
        self.grant = Grant()
        self.credentials: dict[str, object] = {}  # CONNECT's, judged again at a reload
        self.account = self.server.accounts.global_account  # until CONNECT names another
        self.manager: SessionManager | None = None  # the account's MQTT state, once in
        self.session: Session | None = None
        self.filters = SubscriptionSet(self)
        self.will: mqtt.Will | None = None
        self.keepalive = 0.0
        self.host = ""
        self.port = 0
        self.start = time.time()
        self.last_activity = self.start
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        # What /connz shows of a NATS client and an MQTT client has none of.
        self.rtt = 0.0
        self.name = self.lang = self.version = ""
        self.closed = False
        self.close_reason = ""
        self._last_rx = time.monotonic()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._out: list[bytes] = []
        self._dirty = False
        # Packets wait here while a CONNECT or SUBSCRIBE is still being set up in
        # JetStream, so what follows it sees its effect (reading is paused meanwhile).
        self._backlog: deque[mqtt.Packet] = deque()
        self._busy = False

    # ---- asyncio Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("", 0)
        self.host, self.port = str(peer[0]), int(peer[1])
        self.listener.register(self)
        # A client that never sends CONNECT is dropped after the auth timeout.
        loop = asyncio.get_running_loop()
        self._timers["connect"] = loop.call_later(self.listener.auth_timeout, self._no_connect)

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.time()
        if self.server.busy_poll is not None:
            self.server.busy_poll.read()
        self._last_rx = time.monotonic()
        try:
            self._backlog.extend(self.decoder.receive(data))
        except mqtt.ProtocolError as exc:
            self._protocol_error(str(exc))
            return
        self._drain()

    def _drain(self) -> None:
        backlog = self._backlog
        while backlog and not self._busy and not self.closed:
            try:
                self._dispatch(backlog.popleft())
            except mqtt.ProtocolError as exc:
                self._protocol_error(str(exc))
                return

    def _run(self, work: Coroutine[Any, Any, None]) -> None:
        """Set up state in JetStream before the next packet is looked at."""
        self._busy = True
        if self.transport is not None:
            self.transport.pause_reading()

        async def step() -> None:
            try:
                await work
            finally:
                self._busy = False
                if not self.closed and self.transport is not None:
                    self.transport.resume_reading()
                    asyncio.get_running_loop().call_soon(self._drain)

        self.listener.spawn(step(), self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("Client Closed", abnormal=True)

    # ---- packets ------------------------------------------------------------------------

    def _dispatch(self, packet: mqtt.Packet) -> None:
        kind = type(packet)
        if kind is mqtt.Publish:
            self._on_publish(packet)  # type: ignore[arg-type]
        elif kind is mqtt.PubAck:
            self._session().on_puback(packet.packet_id)  # type: ignore[union-attr]
        elif kind is mqtt.PingReq:
            self.queue(b"\xd0\x00")
        elif kind is mqtt.Subscribe:
            self._on_subscribe(packet)  # type: ignore[arg-type]
        elif kind is mqtt.Unsubscribe:
            self._on_unsubscribe(packet)  # type: ignore[arg-type]
        elif kind is mqtt.PubRec:
            spawn = self.listener.spawn
            spawn(self._session().on_pubrec(packet.packet_id), self)  # type: ignore[union-attr]
        elif kind is mqtt.PubRel:
            spawn = self.listener.spawn
            spawn(self._session().on_pubrel(packet.packet_id), self)  # type: ignore[union-attr]
        elif kind is mqtt.PubComp:
            self._session().on_pubcomp(packet.packet_id)  # type: ignore[union-attr]
        elif kind is mqtt.Connect:
            self._on_connect(packet)  # type: ignore[arg-type]
        elif kind is mqtt.ConnectRefused:
            self._refuse(packet.code, packet.reason)  # type: ignore[union-attr]
        elif kind is mqtt.Disconnect:
            self.will = None  # [MQTT-3.1.2-8]: a clean DISCONNECT discards the Will
            self.close("Client Closed")

    @property
    def subs(self) -> dict[str, Any]:
        """Subscriptions as /connz lists them: the filters' subjects, then consumer inboxes."""
        found: dict[str, Any] = {sub.subject: sub for sub in self.filters.all()}
        if self.session is not None:
            found.update((inbox, Inbox(inbox)) for inbox in self.session.inboxes())
        return found

    def _session(self) -> Session:
        assert self.session is not None  # CONNECT comes first: the decoder enforces it
        return self.session

    def _on_connect(self, packet: mqtt.Connect) -> None:
        self._cancel("connect")
        if packet.will is not None:
            try:
                to_subject(packet.will.topic)
            except TopicError as exc:
                raise mqtt.ProtocolError(str(exc)) from None
        will = packet.will
        if will is not None and will.qos == 2 and self.listener.config.reject_qos2_publish:
            # The reference refuses it while reading the CONNECT, before the client id.
            peer = (self.host, self.port, self.cid)
            log.error('%s:%d - mid:%d - "" - server does not accept QoS2 for Will messages', *peer)
            self.queue(mqtt.encode(mqtt.ConnAck(False, mqtt.QOS2_WILL_REJECTED)))
            self.close("Protocol Violation")
            return
        connect = self.listener.credentials(packet)
        resolver = self.server.resolver
        fetch = resolver.fetching(connect) if resolver is not None else None
        if fetch is None:
            work = self._login(packet, connect)
            if work is not None:
                self._run(work)
            return

        async def fetched() -> None:
            # A JWT user of an account the resolver must fetch logs in once the fetch
            # ends (the packets after CONNECT wait meanwhile), as a NATS client does.
            await asyncio.shield(fetch)
            work = None if self.closed else self._login(packet, connect)
            if work is not None:
                await work

        self._run(fetched())

    def _login(
        self, packet: mqtt.Connect, connect: dict[str, object]
    ) -> Coroutine[Any, Any, None] | None:
        """Authenticate; the work that sets the session up in the user's account, or
        None when the login is refused."""
        listener = self.listener
        self.credentials = connect
        try:
            self.grant = listener.authenticate(connect, self.host)
        except AuthError:
            self._refuse(mqtt.NOT_AUTHORIZED, "authentication error")
            return None
        self.account = self.server.accounts.ensure(self.grant.account)
        self.client_id = packet.client_id or secrets.token_urlsafe(16).replace("-", "_")
        if not limits.has_room(self):
            self._over_account_limit()
            return None
        limits.enter(self)  # counted in its account from now, as a NATS client
        self.manager = manager = listener.manager_for(self.account)
        if self.grant.expires:
            wait = max(0.0, self.grant.expires - time.time())
            self._timers["expiry"] = asyncio.get_running_loop().call_later(
                wait, self.cut_off, self.grant.expiry_error, "Authentication Expired"
            )
        self.will = packet.will
        # The decoder bounded packets by max_payload until now; publishes are judged by
        # their NATS size from here on, as on the reference.
        self.decoder.max_packet = mqtt.MAX_REMAINING_LENGTH
        if packet.keepalive:
            # 1.5 x, cut to whole seconds as the reference computes it (1 s for 1).
            self.keepalive = float(int(packet.keepalive * 1.5))
            self._arm_keepalive(self.keepalive)
        return self._connecting(manager, packet.clean)

    async def _connecting(self, manager: SessionManager, clean: bool) -> None:
        try:
            await manager.connect(self, clean, self._connected)
        except JetStreamError as exc:  # the account's MQTT streams could not be made
            peer = (self.host, self.port, self.cid, self.client_id)
            log.error('%s:%d - mid:%d - "%s" - unable to connect: %s', *peer, exc)
            self.will = None
            self.close("Server Error")

    def _connected(self, session: Session, present: bool) -> None:
        """The session is ready (restored or new): CONNACK, then what it owes the client."""
        if self.closed:
            return
        self.session = session
        self.queue(mqtt.encode(mqtt.ConnAck(present, mqtt.ACCEPTED)))
        session.attach(self)

    def _refuse(self, code: int, reason: str) -> None:
        log.error("%s:%d - mid:%d - %s", self.host, self.port, self.cid, reason)
        self.queue(mqtt.encode(mqtt.ConnAck(False, code)))
        self.close(
            "Authentication Failure" if code == mqtt.NOT_AUTHORIZED else "Protocol Violation"
        )

    def _over_account_limit(self) -> None:
        """The account has its connections: the reference ends the connection with no
        CONNACK (its refusal closes the socket before the NOT_AUTHORIZED goes out)."""
        peer = (self.host, self.port, self.cid, self.client_id)
        log.error('%s:%d - mid:%d - "%s" - %s', *peer, limits.MAX_CONNECTIONS)
        log.error('%s:%d - mid:%d - "%s" - authentication error - User "%s"', *peer,
                  self.grant.user)  # fmt: skip
        log.error('%s:%d - mid:%d - "%s" - unable to connect: authentication error', *peer)
        self.close("Maximum Account Connections Exceeded")
        for hook in self.server.accounts.on_disconnect:  # refused: reported as it ends
            hook(self)

    def _on_publish(self, packet: mqtt.Publish) -> None:
        if packet.qos == 2 and self.listener.config.reject_qos2_publish:
            peer = (self.host, self.port, self.cid, self.client_id)
            log.error('%s:%d - mid:%d - "%s" - QoS=2 is disabled for PUBLISH messages', *peer)
            self.close("Protocol Violation", abnormal=True)
            return
        try:
            subject = subject_of(packet.topic)
        except TopicError as exc:
            raise mqtt.ProtocolError(str(exc)) from None
        size = HEADER_SIZE + len(packet.payload)
        if size > self.server.opts.max_payload:
            log.error("%s:%d - mid:%d - Maximum Payload Violation", self.host, self.port, self.cid)
            self.close("Maximum Payload Exceeded", abnormal=True)
            return
        self.in_msgs += 1
        self.in_bytes += len(packet.payload)
        allowed = not self.grant.restricted or self.grant.can_publish(subject)
        if packet.qos == 1 and not packet.retain:  # the common cases go without a task
            self._session().publish_at_least_once(packet, subject, allowed=allowed)
        elif packet.qos or packet.retain:
            text = subject.decode()
            self.listener.spawn(self._session().publish(packet, text, allowed=allowed))
        elif allowed:  # QoS 0 goes straight to the router
            hdr = PUBLISH_HEADERS[0]
            size = len(hdr) + len(packet.payload)
            self.server.route(None, subject, b"", hdr, packet.payload, size, account=self.account)

    def _on_subscribe(self, packet: mqtt.Subscribe) -> None:
        if self.listener.config.downgrade_qos2_subscribe:
            packet = mqtt.Subscribe(packet.packet_id, self._downgraded(packet.filters))
        codes = self.filters.add(packet.filters)
        session = self._session()

        async def setup() -> None:
            granted = await session.subscribe(packet.filters, codes)
            refused = [f for (f, _), g, c in zip(packet.filters, granted, codes, strict=True)
                       if g != c]  # fmt: skip
            self.filters.remove(tuple(refused))  # JetStream would not keep their messages
            self.queue(mqtt.encode(mqtt.SubAck(packet.packet_id, granted)))
            assert self.manager is not None
            retained = self.manager.retained
            for (topic_filter, _), code in zip(packet.filters, granted, strict=True):
                if code == mqtt.SUBACK_FAILURE:
                    continue
                for sub in self.filters.by_filter.get(topic_filter, ()):
                    for msg in retained.matching(sub.subject, reserved=sub.reserved):
                        qos = min(code, msg.qos)
                        if qos == 2 and self.listener.config.reject_qos2_publish:
                            what = "Rejecting retained message with QoS2 for subscription"
                            self._warn_qos2(f'{what} "{sub.subject}"')
                        else:
                            session.send_retained(msg.topic, msg.payload, qos)

        self._run(setup())

    def _downgraded(self, filters: tuple[tuple[bytes, int], ...]) -> tuple[tuple[bytes, int], ...]:
        """QoS 2 requests granted as QoS 1 (`downgrade_qos2_subscribe`), each logged as
        the reference logs it, with the filter as a subject."""
        out = []
        for topic_filter, qos in filters:
            if qos == 2:
                try:
                    shown = to_subject(topic_filter, wildcards=True).decode()
                except TopicError:
                    shown = topic_filter.decode(errors="replace")
                self._warn_qos2(f'Downgrading subscription QoS2 to QoS1 for "{shown}"')
                qos = 1
            out.append((topic_filter, qos))
        return tuple(out)

    def _warn_qos2(self, what: str) -> None:
        """The reference's warning for a QoS 2 the configuration turned away."""
        peer = (self.host, self.port, self.cid, self.client_id, what)
        log.warning('%s:%d - mid:%d - "%s" - %s, as configured', *peer)

    def _on_unsubscribe(self, packet: mqtt.Unsubscribe) -> None:
        self.filters.remove(packet.filters)
        session = self._session()

        async def teardown() -> None:
            await session.unsubscribe(packet.filters)
            self.queue(mqtt.encode(mqtt.UnsubAck(packet.packet_id)))

        self._run(teardown())

    def regrant(self, grant: Grant) -> None:
        """Take a config reload's permissions: a topic filter they no longer allow is
        unsubscribed, its QoS ≥ 1 consumer too (MQTT has no -ERR to tell the client)."""
        self.grant = grant
        if not grant.restricted:
            return
        refused = tuple(
            topic_filter
            for topic_filter, subs in self.filters.by_filter.items()
            if not all(grant.can_subscribe(sub.subject) for sub in subs)
        )
        if not refused:
            return
        self.filters.remove(refused)
        session = self.session
        if session is not None:
            self.listener.spawn(session.unsubscribe(refused), self)

    # ---- keepalive and deadlines ---------------------------------------------------------

    def _arm_keepalive(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._timers["keepalive"] = loop.call_later(delay, self._keepalive_check)

    def _keepalive_check(self) -> None:
        idle = time.monotonic() - self._last_rx
        if idle >= self.keepalive:
            log.error("%s:%d - mid:%d - keepalive expired", self.host, self.port, self.cid)
            self.close("Stale Connection", abnormal=True)
        else:
            self._arm_keepalive(self.keepalive - idle)

    logs_cut_off = True  # see cut_off: the account limits leave the line to it

    def cut_off(self, why: str, reason: str = "Authentication Revoked") -> None:
        """The login is taken back (its JWT expired, its user revoked, its account
        deleted or over its connections): MQTT has no -ERR to say so; the log does."""
        log.error('%s:%d - mid:%d - "%s" - %s', self.host, self.port, self.cid, self.client_id, why)
        self.close(reason)

    def _no_connect(self) -> None:
        self.close("Authentication Timeout")

    def _cancel(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _protocol_error(self, reason: str) -> None:
        log.error("%s:%d - mid:%d - %s", self.host, self.port, self.cid, reason)
        self.close("Protocol Violation", abnormal=True)

    # ---- output -------------------------------------------------------------------------

    def queue(self, data: bytes) -> None:
        self._out.append(data)
        if not self._dirty:
            self._dirty = True
            self.server.mark_dirty(self)  # type: ignore[arg-type]  # flushed like a client

    def deliver(self, data: bytes, size: int) -> None:
        """One PUBLISH towards the client (`size`: its payload, for the counters)."""
        self.out_msgs += 1
        self.out_bytes += size
        self.queue(data)

    def flush(self) -> None:
        """Hand queued packets to the transport; a client that does not read them is cut
        off past `max_pending`, as a NATS client is."""
        self._dirty = False
        out, self._out = self._out, []
        transport = self.transport
        if not out or transport is None or self.closed:
            return
        transport.write(b"".join(out))
        limit = self.server.opts.max_pending
        if transport.get_write_buffer_size() > limit:
            self.server.trouble.slow["clients"] += 1
            peer = (self.host, self.port, self.cid, self.client_id, limit)
            log.info('%s:%d - mid:%d - "%s" - Slow Consumer Detected: MaxPending of %d Exceeded',
                     *peer)  # fmt: skip
            self.close("Slow Consumer (Pending Bytes)", abnormal=True, abort=True)

    def close(self, reason: str, *, abnormal: bool = False, abort: bool = False) -> None:
        """Close once; the Will goes out only when the close was not the client's choice.
        `abort` drops what is unsent (a slow consumer's backlog)."""
        if not self._closing(reason, flush=not abort):
            return
        self.filters.clear()
        self.listener.unregister(self)
        limits.leave(self)  # with its disconnect event, when it was counted
        manager = self.manager
        if manager is not None:
            manager.closed(self)
        if self.session is not None:
            self.session.detach(self)
        will, self.will = self.will, None
        if abnormal and will is not None and manager is not None:
            subject = to_subject(will.topic).decode()
            allowed = not self.grant.restricted or self.grant.can_publish(subject.encode())
            manager.publish_will(will, subject, allowed=allowed)
        self._hang_up_socket(abort=abort)
